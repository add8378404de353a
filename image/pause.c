/*
 * pause: the process that holds a pod's sandbox (its namespaces) open while
 * the pod's containers come and go. containerd runs it as the first
 * container of every pod, from the sandbox image the image build makes of
 * this program (image/oci.ts, pauseImage) and pins; nothing is pulled.
 *
 * It waits for signals and nothing else: SIGINT and SIGTERM end it (exit 0;
 * containerd stops sandboxes with SIGKILL anyway), SIGCHLD reaps children
 * (it is PID 1 of a pod that shares its process namespace).
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int signo) {
	(void)signo;
	_exit(0);
}

static void reap(int signo) {
	int saved = errno;
	(void)signo;
	while (waitpid(-1, NULL, WNOHANG) > 0) {
	}
	errno = saved;
}

static int on(int signo, void (*handler)(int)) {
	struct sigaction action;
	memset(&action, 0, sizeof action);
	action.sa_handler = handler;
	action.sa_flags = SA_RESTART;
	sigemptyset(&action.sa_mask);
	return sigaction(signo, &action, NULL);
}

int main(void) {
	if (on(SIGINT, quit) || on(SIGTERM, quit) || on(SIGCHLD, reap)) {
		static const char message[] = "pause: sigaction failed\n";
		(void)!write(2, message, sizeof message - 1);
		return 1;
	}
	for (;;) pause();
}
