/*
 * pause: the pod sandbox process of the Kubernetes node sless's tests run.
 *
 * The kubelet starts it first in every pod; it holds the pod's namespaces for
 * the pod's containers and does nothing else. As the pod's PID 1 (when the
 * pod shares its process namespace) it reaps the children that end up with
 * it. SIGINT and SIGTERM end it with status 0, which is how the kubelet
 * stops a pod.
 *
 * Built by scripts/ensure-images with `gcc -static -Os` into the image
 * `pause`; it depends on nothing but the kernel.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig)
{
	(void)sig;
	_exit(0);
}

static void reap(int sig)
{
	int saved = errno;

	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	errno = saved;
}

int main(int argc, char **argv)
{
	struct sigaction sa;

	if (argc > 1 && strcmp(argv[1], "-v") == 0) {
		puts("pause (sless)");
		return 0;
	}

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = stop;
	if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) {
		perror("pause: sigaction");
		return 1;
	}
	sa.sa_handler = reap;
	sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
	if (sigaction(SIGCHLD, &sa, NULL) != 0) {
		perror("pause: sigaction");
		return 1;
	}

	for (;;)
		pause();
}
