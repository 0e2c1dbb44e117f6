/* sshd-socket: the per-board inetd-style listener of an edge-llm virtual board.
 *
 * QLI images start sshd socket-activated, as openembedded-core ships it
 * (openembedded-core 06dd66e6, meta/recipes-connectivity/openssh/openssh/sshd.socket:
 * "ListenStream=22" and "Accept=yes"; sshd@.service: "ExecStart=-@SBINDIR@/sshd -i $SSHD_OPTS",
 * "StandardInput=socket"): nothing but the socket exists while nobody is connected, and each
 * accepted connection gets its own `sshd -i` with the connection as stdin and stdout.
 * This program is that socket unit for one virtual board, a few hundred kilobytes instead of
 * an idle sshd's several megabytes:
 *
 *     sshd-socket HOST PORT PROGRAM [ARG...]
 *
 * binds HOST:PORT, and for every connection forks a child in a new session (what systemd gives
 * each sshd@ instance; sshd in inetd mode does not call setsid itself) whose stdin and stdout are
 * the connection; stderr stays this program's (the board's agent log), as systemd sends a
 * service's stderr to the journal, never down the socket. The listening socket is close-on-exec.
 * Children are reaped without waiting (SA_NOCLDWAIT); sessions outlive this process, like
 * sshd@.service's "KillMode=process" instances outlive a stopped sshd.socket.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* What systemd gives every service: default signal dispositions (a background job of the holder's
 * shell inherits SIGINT/SIGQUIT ignored; sshd must see its own SIGCHLD) and an empty mask. */
static void child_defaults(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        sigaction(sig, &sa, NULL);      /* fails harmlessly for SIGKILL, SIGSTOP */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: sshd-socket HOST PORT PROGRAM [ARG...]\n");
        return 2;
    }
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    char *end = NULL;
    long port = strtol(argv[2], &end, 10);
    if (!end || *end || port < 1 || port > 65535 || inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) {
        fprintf(stderr, "sshd-socket: bad address %s:%s\n", argv[1], argv[2]);
        return 2;
    }
    addr.sin_port = htons((unsigned short)port);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(lfd, SOMAXCONN) < 0) {
        fprintf(stderr, "sshd-socket: cannot listen on %s:%ld: %s\n", argv[1], port, strerror(errno));
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sa.sa_flags = SA_NOCLDWAIT;         /* no zombies, no reaping loop */
    sigaction(SIGCHLD, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            fprintf(stderr, "sshd-socket: accept: %s\n", strerror(errno));
            struct timespec pause = {0, 100 * 1000 * 1000};  /* out of fds or memory: do not spin */
            nanosleep(&pause, NULL);
            continue;
        }
        pid_t pid = fork();
        if (pid == 0) {
            child_defaults();
            setsid();
            if (dup2(fd, 0) < 0 || dup2(fd, 1) < 0)
                _exit(127);
            execv(argv[3], argv + 3);
            fprintf(stderr, "sshd-socket: cannot run %s: %s\n", argv[3], strerror(errno));
            _exit(127);
        }
        if (pid < 0)
            fprintf(stderr, "sshd-socket: fork: %s\n", strerror(errno));
        close(fd);
    }
}
