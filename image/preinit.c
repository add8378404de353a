// Pre-init: the first program the kernel runs from the initramfs (/init).
//
// bun aborts at startup without /proc, and the node's init wants /dev, so
// this mounts both and then replaces itself with the bun-compiled init
// (/init.bin), passing argv and envp through unchanged. It is PID 1 until the
// exec: it never exits (PID 1 exiting panics the kernel); when something
// fails it says why on /dev/console and sleeps forever.
//
// Built static (gcc -static -Os) so it needs nothing from the initramfs.

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define INIT_BINARY "/init.bin"
#define CONSOLE "/dev/console"

static void write_all(int fd, const char *text) {
  size_t left = strlen(text);
  while (left > 0) {
    ssize_t n = write(fd, text, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text += n;
    left -= (size_t)n;
  }
}

// Says "preinit: <what>: <strerror(err)>" on the console, then sleeps forever.
static void halt(const char *what, int err) {
  int fd = open(CONSOLE, O_WRONLY | O_NOCTTY);
  if (fd < 0) fd = STDERR_FILENO;
  write_all(fd, "preinit: ");
  write_all(fd, what);
  write_all(fd, ": ");
  write_all(fd, strerror(err));
  write_all(fd, "\n");
  for (;;) pause();
}

static void mount_at(const char *source, const char *target, const char *type, unsigned long flags, const char *data) {
  if (mkdir(target, 0755) != 0 && errno != EEXIST) halt(target, errno);
  // EBUSY: already mounted (a kernel with CONFIG_DEVTMPFS_MOUNT mounts /dev itself).
  if (mount(source, target, type, flags, data) != 0 && errno != EBUSY) halt(target, errno);
}

// The kernel opens /dev/console as fds 0-2 before running /init when the
// initramfs has that node; if it did not, use the devtmpfs one.
static void ensure_console_fds(void) {
  if (fcntl(STDIN_FILENO, F_GETFD) >= 0) return;
  int fd = open(CONSOLE, O_RDWR | O_NOCTTY);
  if (fd < 0) return;
  for (int i = 0; i <= 2; i++) {
    if (fd != i) dup2(fd, i);
  }
  if (fd > 2) close(fd);
}

int main(int argc, char **argv, char **envp) {
  (void)argc;
  mount_at("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  mount_at("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
  ensure_console_fds();
  execve(INIT_BINARY, argv, envp);
  halt("could not exec " INIT_BINARY, errno);
  return 0;
}
