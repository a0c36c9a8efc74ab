// A look-alike of a crawler's QEMU, for the e2e suite's trust test (e2e/trust_test.go):
// an unprivileged process that names itself as KubeVirt's QEMU of a domain does
// ("qemu-system-x86_64 -name guest=<domain>,...") and one of its threads as QEMU names a
// KVM vCPU thread ("CPU 0/KVM"), then sleeps. The NIC agent must never make that thread
// realtime. Built static by the test (gcc), shipped in a ConfigMap, run in the pause
// image: no image of its own.
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
static void *vcpu(void *a) {
  char p[40] = "/proc/self/task/", n[16]; long tid = syscall(SYS_gettid); int i = 15; n[i] = 0;
  do { n[--i] = '0' + tid % 10; tid /= 10; } while (tid);
  strcat(strcat(p, n + i), "/comm");
  int fd = open(p, O_WRONLY); if (fd >= 0) { write(fd, "CPU 0/KVM", 9); close(fd); }
  for (;;) pause();
}
int main(int argc, char **argv) {
  if (argc < 2 || strncmp(argv[0], "qemu-", 5) != 0) { char *args[] = {"qemu-system-x86_64", "-name", argc > 1 ? argv[1] : "guest=x", 0}; execv("/proc/self/exe", args); return 1; }
  pthread_t t; pthread_create(&t, 0, vcpu, 0); for (;;) pause();
}
