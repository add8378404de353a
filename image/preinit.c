// Pre-init: the first program the kernel runs from the initramfs (/init).
//
// First it makes "/" a mount of its own: the initramfs is the kernel's
// rootfs, which pivot_root(2) cannot move (it has no parent mount), and runc
// pivot_roots into every container (containerd issues 1973 and 4828). A bind
// mount of rootfs, moved on top of rootfs and chrooted into, is a root like
// that of a system booted from disk: rootfs stays underneath, unreachable,
// as it always is. This costs a few syscalls and copies nothing; the
// alternative, copying the initramfs into a tmpfs, costs its size in memory
// and time.
//
// bun aborts at startup without /proc, and the node's init wants /dev, so
// this then mounts both and replaces itself with the bun-compiled init
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

#define BIND_POINT "/.root"

// mount --bind / /.root; cd /.root; mount --move . /; chroot . (see the header).
static void root_on_own_mount(void) {
  if (mkdir(BIND_POINT, 0700) != 0 && errno != EEXIST) halt(BIND_POINT, errno);
  if (mount("/", BIND_POINT, NULL, MS_BIND, NULL) != 0) halt("bind mount of / on " BIND_POINT, errno);
  if (chdir(BIND_POINT) != 0) halt("chdir " BIND_POINT, errno);
  if (mount(".", "/", NULL, MS_MOVE, NULL) != 0) halt("move " BIND_POINT " onto /", errno);
  if (chroot(".") != 0) halt("chroot into the bind mount", errno);
  if (chdir("/") != 0) halt("chdir /", errno);
  rmdir(BIND_POINT);  // the same rootfs directory, now unused
}

int main(int argc, char **argv, char **envp) {
  (void)argc;
  root_on_own_mount();
  mount_at("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  mount_at("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
  ensure_console_fds();
  execve(INIT_BINARY, argv, envp);
  halt("could not exec " INIT_BINARY, errno);
  return 0;
}
