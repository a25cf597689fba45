/* Between c_api_cuda_cases.c (C99: the checks of capi/gyre_cuda.h on the fake CUDA
 * runtime) and c_api_cuda_ranks.cc (the C++ driver that forks the ranks). */
#ifndef GYRE_TESTS_C_API_CUDA_CASES_H
#define GYRE_TESTS_C_API_CUDA_CASES_H

#ifdef __cplusplus
extern "C" {
#endif

/* One rank of nranks: the world from the environment (RANK, WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT; GYRE_CUDA_IPC picks the path, and ipc says which one to expect). 0 when
 * every check passed (failures are on stderr). */
int c_api_cuda_rank(int rank, int nranks, int ipc);

/* From the driver, in a rank: returns once every rank has called it (1), or 0 at the
 * group's time limit. Outside the communicator, so that one rank's abort cannot reach a
 * peer still checking its last results. */
int c_api_cuda_all_ranks_here(const char* what);

#ifdef __cplusplus
}
#endif

#endif
