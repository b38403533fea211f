/* Links into a second build of shared/anchors/mpi_coll_perf.c
 * (mpi_coll_perf_rewrite) through MPI's profiling interface: before each
 * all-reduce, reduce-scatter and all-gather it writes every cache line of the
 * call's input back unchanged, as `loom perf --rewrite-inputs 1` does, so
 * that both sides of `perf/compare.sh --rewrite-inputs` read freshly written
 * memory instead of a buffer unchanged since the last call. The values, and
 * so the harness's check, stay as they were. */
#include <mpi.h>
#include <stddef.h>

static void rewrite(const void *buf, int count, MPI_Datatype type, int blocks) {
  if (buf == MPI_IN_PLACE || count <= 0) return;
  int size = 0;
  MPI_Type_size(type, &size);
  volatile char *p = (volatile char *)(size_t)buf;
  const size_t bytes = (size_t)count * (size_t)size * (size_t)blocks;
  for (size_t i = 0; i < bytes; i += 64) p[i] = p[i];
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm) {
  rewrite(sendbuf, count, type, 1);
  return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
}

int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                             MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  rewrite(sendbuf, recvcount, type, n);
  return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm);
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  rewrite(sendbuf, sendcount, sendtype, 1);
  return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}
