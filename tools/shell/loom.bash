# bash completion for loom. Commands come from `loom --help` and each
# command's options from `loom COMMAND --help`, so the completion always
# follows the binary it completes. Installed to
# share/bash-completion/completions/loom.

# Options named in a help text: every -x / --long-name word.
_loom_options() {
  "$1" "$2" --help 2>&1 | grep -oE -- '(^|[][ ,|(])--?[A-Za-z][A-Za-z0-9_-]*' |
    sed -E 's/^[][ ,|(]//' | sort -u
}

_loom() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  local prev=${COMP_WORDS[COMP_CWORD - 1]}
  local loom=${COMP_WORDS[0]}
  local cmd=${COMP_WORDS[1]:-}
  local i words
  COMPREPLY=()
  if [[ $COMP_CWORD -eq 1 ]]; then
    words=$("$loom" --help 2>/dev/null |
      awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { on = 0 }')
    COMPREPLY=($(compgen -W "$words --help --version" -- "$cur"))
    return
  fi
  # `loom run [options] -- program args`: past the --, complete the program.
  if [[ $cmd == run ]]; then
    for ((i = 2; i < COMP_CWORD; i++)); do
      if [[ ${COMP_WORDS[i]} == -- ]]; then
        if ((COMP_CWORD == i + 1)); then
          COMPREPLY=($(compgen -c -- "$cur"))
        else
          COMPREPLY=($(compgen -f -- "$cur"))
        fi
        return
      fi
    done
    if [[ $prev == --bind-to ]]; then
      COMPREPLY=($(compgen -W "auto core none" -- "$cur"))
      return
    fi
  fi
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$(_loom_options "$loom" "$cmd")" -- "$cur"))
    return
  fi
  # `loom perf <collective>`: the names the help lists.
  if [[ $cmd == perf && $COMP_CWORD -eq 2 ]]; then
    words=$("$loom" perf --help 2>&1 | awk '/collective:/ { on = 1 } on { print } /nccl-tests names/ { exit }' |
      sed -E 's/.*collective://; s/\(.*//; s/,/ /g; s/ or / /g')
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
    return
  fi
  if [[ $cmd == help && $COMP_CWORD -eq 2 ]]; then
    words=$("$loom" --help 2>/dev/null |
      awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { on = 0 }')
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
    return
  fi
  COMPREPLY=($(compgen -f -- "$cur"))
}
complete -o filenames -F _loom loom
