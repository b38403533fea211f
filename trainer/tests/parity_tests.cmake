# The validation matrix of docs/trainer.md: bit-exact and tolerance parity
# against the single-rank reference, mutation checks and the learning test.
# Configs are tiny so the whole matrix runs in a minute or two on 2 cores.

set(_parity ${CMAKE_CURRENT_SOURCE_DIR}/tests/parity.sh)

# loom_train_parity(NAME EXPECT TOL NP_REF "REF ARGS" NP_CAND "CAND ARGS")
function(loom_train_parity name expect tol np_ref ref_args np_cand cand_args)
  add_test(NAME trainer_${name}
    COMMAND sh ${_parity} ${expect} $<TARGET_FILE:loom> $<TARGET_FILE:loom-train> ${tol}
            ${np_ref} "${ref_args}" ${np_cand} "${cand_args}")
  set_tests_properties(trainer_${name} PROPERTIES
    LABELS mp TIMEOUT 300 ENVIRONMENT "${LOOM_TRAIN_TEST_ENV}")
endfunction()

# --- bit-exact (difference 0) ---
set(_exact "--steps 4 --micro-batches 2")
# DP=2 against one process that sums the two ranks' gradients. 13 buckets of
# 16384 floats: one DP operation per bucket and step, not per micro-step.
loom_train_parity(dp2_plain_exact match 0 1 "${_exact} --sim-dp 2" 2 "${_exact} --dp 2 --sync plain --expect-dp-ops 1")
loom_train_parity(dp2_bucketed_exact match 0 1 "${_exact} --sim-dp 2" 2 "${_exact} --dp 2 --sync bucketed --expect-dp-ops 13")
loom_train_parity(dp2_overlap_exact match 0 1 "${_exact} --sim-dp 2" 2 "${_exact} --dp 2 --sync overlap --expect-dp-ops 13")
loom_train_parity(dp2_overlap_accum_exact match 0 1 "--steps 4 --micro-batches 4 --sim-dp 2" 2 "--steps 4 --micro-batches 4 --dp 2 --sync overlap --expect-dp-ops 13")
loom_train_parity(dp2_zero_exact match 0 1 "${_exact} --sim-dp 2" 2 "${_exact} --dp 2 --zero 1 --expect-dp-ops 26")
loom_train_parity(zero_vs_dp_exact match 0 2 "${_exact} --dp 2" 2 "${_exact} --dp 2 --zero 1")
set(_pp "--steps 4 --micro-batches 4")
foreach(stages 2 4)
  foreach(schedule gpipe 1f1b)
    loom_train_parity(pp${stages}_${schedule}_exact match 0 1 "${_pp}" ${stages} "${_pp} --pp ${stages} --schedule ${schedule}")
  endforeach()
endforeach()
loom_train_parity(gpipe_vs_1f1b_exact match 0 4 "${_pp} --pp 4 --schedule gpipe" 4 "${_pp} --pp 4 --schedule 1f1b")
loom_train_parity(grid222_twice_exact match 0 8 "${_exact} --dp 2 --tp 2 --pp 2 --zero 1" 8 "${_exact} --dp 2 --tp 2 --pp 2 --zero 1")

# --- tolerance: 1e-4 x largest reference gradient per tensor, loss 1e-4 for 20 steps ---
set(_tol "--steps 20 --micro-batches 2")
loom_train_parity(tp2_tol match 1e-4 1 "${_tol}" 2 "${_tol} --tp 2")
loom_train_parity(tp4_tol match 1e-4 1 "${_tol}" 4 "${_tol} --tp 4")
loom_train_parity(dp4_tol match 1e-4 1 "${_tol}" 4 "${_tol} --dp 4")
loom_train_parity(grid221_zero_tol match 1e-4 1 "${_tol}" 4 "${_tol} --dp 2 --tp 2 --zero 1")
loom_train_parity(grid122_tol match 1e-4 1 "${_tol}" 4 "${_tol} --tp 2 --pp 2")
loom_train_parity(grid222_zero_tol match 1e-4 1 "${_tol}" 8 "${_tol} --dp 2 --tp 2 --pp 2 --zero 1")

# --- mutations: the same checks must catch a dropped collective or scale ---
loom_train_parity(mutant_tp_allreduce_caught differ 1e-4 1 "${_tol}" 2 "${_tol} --tp 2 --mutate drop-tp-allreduce")
loom_train_parity(mutant_avg_scale_caught differ 1e-4 1 "${_tol}" 4 "${_tol} --dp 4 --mutate drop-avg-scale")
loom_train_parity(mutant_zero_avg_scale_caught differ 0 1 "${_exact} --sim-dp 2" 2 "${_exact} --dp 2 --zero 1 --mutate drop-avg-scale")

# --- learning: a seeded Markov chain, loss within 0.1 nats of its entropy rate ---
add_test(NAME trainer_markov_learns
  COMMAND loom-train --task markov --steps 300 --layers 2 --channels 32 --lr 3e-3
          --learn-margin 0.1 --quiet)
set_tests_properties(trainer_markov_learns PROPERTIES
  LABELS unit TIMEOUT 300 ENVIRONMENT "${LOOM_TRAIN_TEST_ENV}")
