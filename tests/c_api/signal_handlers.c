/* A program linked with libloom_nccl.so keeps its own actions for the fatal
 * signals: loading loom (and UCX under it) installs no crash handler unless
 * the user asks UCX for one (UCX_HANDLE_ERRORS). Prints each signal whose
 * handler lives in UCX's or loom's libraries and exits 1 if any does (a
 * sanitizer's own handler is the program's, and allowed). */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "loom/nccl.h"

int main(void) {
  const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};
  const char* names[] = {"SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE"};
  int version = 0;
  int foreign = 0;
  (void)ncclGetVersion(&version); /* a call into the library, so it is loaded */
  for (int i = 0; i < 4; ++i) {
    struct sigaction now;
    Dl_info info;
    void* where = NULL;
    if (sigaction(sigs[i], NULL, &now) != 0 || now.sa_handler == SIG_DFL ||
        now.sa_handler == SIG_IGN) {
      continue;
    }
    /* The handler's address as data (POSIX: function and object pointers match). */
    memcpy(&where, &now.sa_handler, sizeof(where));
    if (dladdr(where, &info) != 0 && info.dli_fname != NULL &&
        (strstr(info.dli_fname, "libucs") != NULL || strstr(info.dli_fname, "loom") != NULL)) {
      printf("%s has a handler in %s\n", names[i], info.dli_fname);
      foreign = 1;
    }
  }
  return foreign;
}
