/* Between c_api_cases.c (C99: the checks of the C API) and c_api_test.cc (the
 * C++ driver that forks the ranks with fork_ranks.h). */
#ifndef GYRE_TESTS_C_API_CASES_H
#define GYRE_TESTS_C_API_CASES_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define C_API_RANKS 4

/* The cases, by index: their names (the tests'). */
int c_api_case_count(void);
const char* c_api_case_name(int which);
/* Case `which` on rank `rank` of C_API_RANKS, the world made from the environment
 * (mode_env) or from a unique id; 0 when every check passed (failures are on stderr). */
int c_api_rank(int mode_env, int which, int rank);
/* The checks without a communicator, in the test process: the number that failed. */
int c_api_parent_checks(void);

/* From the driver, in a rank: the harness's ordering and values (fork_ranks.h). */
void fork_ranks_say(const char* what);
int fork_ranks_wait_for(int rank, const char* what); /* 1 once said; 0 at the group's limit */
void fork_ranks_publish(const char* name, const void* data, size_t bytes);
size_t fork_ranks_read(const char* name, void* data, size_t bytes); /* its size; 0 if none came */

#ifdef __cplusplus
}
#endif

#endif
