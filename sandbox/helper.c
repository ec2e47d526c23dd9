/* hangar-helper: every program hangar itself runs inside a sandbox, in one static binary.
 *
 * The binary is built on the node (hangar.sandbox.helper), mounted read-only into every
 * docker sandbox and run there by absolute path, so nothing of the image's file system
 * (its shell, its coreutils, its python3, its dynamic loader, /etc/ld.so.preload) runs
 * inside hangar's own helpers, whatever an agent running as root changed. It reads no
 * environment variable: `timeout` passes the environment on to the command it runs, but
 * finds a command named without a `/` only in the folders `-p` lists (the sandbox's PATH
 * as hangar configured it, given on the command line), else in SEARCH below, never in
 * the PATH of its own environment.
 *
 *   hangar-helper keeper LEASE STALE_S CHECK_S   live while LEASE is fresher than STALE_S
 *   hangar-helper timeout [-k DUR] [-p DIRS] DUR CMD...
 *                                                 coreutils' timeout: 124, or 137 once killed
 *   hangar-helper forward PORT                    the relay's and egress proxy's tunnel end
 *   hangar-helper mkdir PATH...                   mkdir -p
 *   hangar-helper remove PATH...                  rm -rf (never following a symlink)
 *   hangar-helper ids                             "UID GID" of the caller
 *   hangar-helper cat FILE                        a regular file's bytes (1 MiB at most)
 *   hangar-helper observe [-k DUR] DUR PROG...    a verifier run and watched (observe.c)
 *   hangar-helper tar DIR                         DIR's contents as tar, no link followed (tarout.c)
 *
 * The forwarder speaks the frames of hangar/models/forwarder.py: kind (1 byte) | channel
 * (4, big-endian) | length (4) | payload; READY=0, OPEN=1, DATA=2, EOF=3. A frame longer
 * than MAX_FRAME from the host ends the forwarder (the host never sends one).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHUNK 65536
#define MAX_FRAME (CHUNK + 1024)
#define MAX_CHANNELS 256
#define PENDING_CAP (1 << 20)
enum { READY = 0, OPEN = 1, DATA = 2, EOF_ = 3 };

static int fail(const char *what) {
    dprintf(2, "hangar-helper: %s: %s\n", what, strerror(errno));
    return 1;
}

/* -- keeper ----------------------------------------------------------------------------- */

static int keeper(int argc, char **argv) {
    if (argc != 3) {
        dprintf(2, "usage: hangar-helper keeper LEASE STALE_S CHECK_S\n");
        return 2;
    }
    long stale = atol(argv[1]), check = atol(argv[2]);
    for (;;) {
        struct stat st;
        if (stat(argv[0], &st) != 0 || time(NULL) - st.st_mtime >= stale) return 0;
        sleep((unsigned)(check > 0 ? check : 1));
    }
}

/* -- timeout ---------------------------------------------------------------------------- */

static volatile sig_atomic_t timed_out, got_signal;
static pid_t child;

static double duration(const char *text) {
    char *end;
    double value = strtod(text, &end);
    if (end == text || value < 0) return -1;
    switch (*end) {
    case '\0': case 's': break;
    case 'm': value *= 60; break;
    case 'h': value *= 3600; break;
    case 'd': value *= 86400; break;
    default: return -1;
    }
    return value;
}

static void on_alarm(int sig) {
    (void)sig;
    timed_out = 1;
}

static void on_signal(int sig) { got_signal = sig; }

static void arm(double seconds) {
    struct itimerval when = {0};
    when.it_value.tv_sec = (time_t)seconds;
    when.it_value.tv_usec = (suseconds_t)((seconds - (double)(time_t)seconds) * 1e6);
    if (when.it_value.tv_sec == 0 && when.it_value.tv_usec == 0) when.it_value.tv_usec = 1;
    setitimer(ITIMER_REAL, &when, NULL);
}

/* Signal the command, then its whole group (this process ignoring it), as coreutils does. */
static void signal_all(int sig) {
    kill(child, sig);
    if (sig != SIGKILL) signal(sig, SIG_IGN);
    kill(0, sig);
}

/* Where `timeout` finds a command named without a `/` when no -p is given. */
#define SEARCH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* Run `argv`: a name with a `/` as it is, else the first of `search`'s folders that has
 * it (execvp's rules, minus the environment): EACCES is kept if nothing else runs. */
static void run_found(const char *search, char **argv) {
    const char *name = argv[0];
    if (strchr(name, '/')) {
        execv(name, argv);
        return;
    }
    int denied = 0;
    char path[4096];
    for (const char *dir = search; dir;) {
        const char *end = strchr(dir, ':');
        int length = (int)(end ? (size_t)(end - dir) : strlen(dir));
        const char *folder = length ? dir : "."; /* an empty entry is the current folder */
        if (snprintf(path, sizeof path, "%.*s/%s", length ? length : 1, folder, name) <
            (int)sizeof path) {
            execv(path, argv);
            if (errno == EACCES) denied = 1;
        }
        dir = end ? end + 1 : NULL;
    }
    errno = denied ? EACCES : ENOENT;
}

static int timeout(int argc, char **argv) {
    double kill_after = -1;
    const char *search = SEARCH;
    int i = 0;
    for (;;) {
        if (i + 1 < argc && strcmp(argv[i], "-k") == 0) {
            kill_after = duration(argv[i + 1]);
            i += 2;
        } else if (i < argc && strncmp(argv[i], "-k", 2) == 0 && argv[i][2]) {
            kill_after = duration(argv[i] + 2);
            i += 1;
        } else if (i + 1 < argc && strcmp(argv[i], "-p") == 0) {
            search = argv[i + 1];
            i += 2;
        } else {
            break;
        }
    }
    if (i < argc && strcmp(argv[i], "--") == 0) i++;
    if (argc - i < 2) {
        dprintf(2, "usage: hangar-helper timeout [-k DURATION] [-p DIRS] DURATION COMMAND...\n");
        return 125;
    }
    double limit = duration(argv[i]);
    if (limit < 0) {
        dprintf(2, "hangar-helper timeout: bad duration %s\n", argv[i]);
        return 125;
    }
    setpgid(0, 0); /* one group: the command's descendants die with it */
    struct sigaction alarm_action = {.sa_handler = on_alarm}, stop = {.sa_handler = on_signal};
    sigaction(SIGALRM, &alarm_action, NULL);
    sigaction(SIGTERM, &stop, NULL);
    sigaction(SIGINT, &stop, NULL);
    sigaction(SIGHUP, &stop, NULL);
    signal(SIGTTIN, SIG_IGN);
    signal(SIGTTOU, SIG_IGN);
    child = fork();
    if (child < 0) return fail("fork");
    if (child == 0) {
        signal(SIGTTIN, SIG_DFL);
        signal(SIGTTOU, SIG_DFL);
        signal(SIGALRM, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        run_found(search, argv + i + 1);
        int code = errno == ENOENT ? 127 : 126;
        dprintf(2, "hangar-helper timeout: %s: %s\n", argv[i + 1], strerror(errno));
        _exit(code);
    }
    arm(limit);
    int status, killing = 0, by_timer = 0;
    for (;;) {
        pid_t done = waitpid(child, &status, 0);
        if (done == child) break;
        if (done < 0 && errno != EINTR) return fail("waitpid");
        if (!(timed_out || got_signal)) continue;
        if (killing) {
            signal_all(SIGKILL); /* this process too: 137, as coreutils' timeout */
            continue;
        }
        killing = 1;
        by_timer = timed_out && !got_signal;
        signal_all(got_signal ? got_signal : SIGTERM);
        timed_out = got_signal = 0;
        if (kill_after > 0) arm(kill_after);
        else if (kill_after == 0) signal_all(SIGKILL);
    }
    if (by_timer) return 124;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

/* -- forward ---------------------------------------------------------------------------- */

typedef struct {
    int fd;          /* -1: free */
    uint32_t number; /* the channel's number in frames */
    int ended;       /* sides done: 2 closes it */
    int read_done;   /* the agent's side sent EOF */
    char *pending;   /* bytes from the host not yet written to the agent's socket */
    size_t size, cap;
    int eof_after;   /* shut the agent's write side once pending is written */
} Channel;

static Channel channels[MAX_CHANNELS];

static void write_all(int fd, const void *data, size_t size) {
    const char *p = data;
    while (size) {
        ssize_t n = write(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) _exit(0); /* the host is gone */
        p += n;
        size -= (size_t)n;
    }
}

static void send_frame(int kind, uint32_t number, const void *payload, uint32_t size) {
    unsigned char head[9];
    head[0] = (unsigned char)kind;
    uint32_t n = htonl(number), s = htonl(size);
    memcpy(head + 1, &n, 4);
    memcpy(head + 5, &s, 4);
    write_all(1, head, 9);
    if (size) write_all(1, payload, size);
}

static Channel *find(uint32_t number) {
    for (int i = 0; i < MAX_CHANNELS; i++)
        if (channels[i].fd >= 0 && channels[i].number == number) return &channels[i];
    return NULL;
}

static void finish(Channel *c) {
    if (++c->ended < 2) return;
    close(c->fd);
    free(c->pending);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

static void drop(Channel *c) { /* cut both ways: the agent stopped reading */
    if (!c->read_done) send_frame(EOF_, c->number, NULL, 0);
    c->ended = 1;
    finish(c);
}

static void flush(Channel *c) {
    while (c->size) {
        ssize_t n = send(c->fd, c->pending, c->size, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n <= 0) {
            c->size = 0;
            break;
        }
        memmove(c->pending, c->pending + n, c->size - (size_t)n);
        c->size -= (size_t)n;
    }
    if (c->eof_after) {
        c->eof_after = 0;
        shutdown(c->fd, SHUT_WR);
        finish(c);
    }
}

static void deliver(int kind, uint32_t number, const char *payload, uint32_t size) {
    Channel *c = find(number);
    if (!c) return;
    if (kind == DATA) {
        if (c->size + size > PENDING_CAP) {
            drop(c);
            return;
        }
        if (c->size + size > c->cap) {
            c->cap = c->size + size;
            c->pending = realloc(c->pending, c->cap);
            if (!c->pending) _exit(1);
        }
        memcpy(c->pending + c->size, payload, size);
        c->size += size;
        flush(c);
    } else if (kind == EOF_) {
        c->eof_after = 1;
        flush(c);
    }
}

static int forward(int argc, char **argv) {
    if (argc != 1) {
        dprintf(2, "usage: hangar-helper forward PORT\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < MAX_CHANNELS; i++) channels[i].fd = -1;
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[0]))};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listener, (struct sockaddr *)&address, sizeof address) != 0) return fail("bind");
    if (listen(listener, 64) != 0) return fail("listen");
    send_frame(READY, 0, NULL, 0);
    static char in[MAX_FRAME + 9 + CHUNK], buf[CHUNK];
    size_t have = 0;
    uint32_t next = 0;
    struct pollfd fds[MAX_CHANNELS + 2];
    Channel *owners[MAX_CHANNELS + 2];
    for (;;) {
        int n = 0, used = 0;
        fds[n] = (struct pollfd){.fd = 0, .events = POLLIN};
        owners[n++] = NULL;
        for (int i = 0; i < MAX_CHANNELS; i++) {
            Channel *c = &channels[i];
            if (c->fd < 0) continue;
            used++;
            short events = (short)((c->read_done ? 0 : POLLIN) | (c->size ? POLLOUT : 0));
            if (!events) continue;
            fds[n] = (struct pollfd){.fd = c->fd, .events = events};
            owners[n++] = c;
        }
        if (used < MAX_CHANNELS) {
            fds[n] = (struct pollfd){.fd = listener, .events = POLLIN};
            owners[n++] = NULL;
        }
        if (poll(fds, (nfds_t)n, -1) < 0) {
            if (errno == EINTR) continue;
            return fail("poll");
        }
        for (int k = 0; k < n; k++) {
            if (!fds[k].revents) continue;
            if (fds[k].fd == 0) {
                ssize_t got = read(0, in + have, sizeof in - have);
                if (got < 0 && errno == EINTR) continue;
                if (got <= 0) _exit(0); /* the host closed the stream: every connection goes */
                have += (size_t)got;
                size_t at = 0;
                while (have - at >= 9) {
                    unsigned char *h = (unsigned char *)in + at;
                    uint32_t number, size;
                    memcpy(&number, h + 1, 4);
                    memcpy(&size, h + 5, 4);
                    number = ntohl(number);
                    size = ntohl(size);
                    if (size > MAX_FRAME) {
                        dprintf(2, "hangar-helper forward: a frame of %u bytes\n", size);
                        _exit(3);
                    }
                    if (have - at < 9 + (size_t)size) break;
                    deliver(h[0], number, in + at + 9, size);
                    at += 9 + size;
                }
                memmove(in, in + at, have - at);
                have -= at;
            } else if (fds[k].fd == listener) {
                int client = accept4(listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (client < 0) continue;
                Channel *c = NULL;
                for (int i = 0; i < MAX_CHANNELS && !c; i++)
                    if (channels[i].fd < 0) c = &channels[i];
                if (!c) {
                    close(client);
                    continue;
                }
                memset(c, 0, sizeof *c);
                c->fd = client;
                c->number = ++next;
                send_frame(OPEN, c->number, NULL, 0);
            } else {
                Channel *c = owners[k];
                if (c->fd != fds[k].fd) continue; /* closed while handling this round */
                if (fds[k].revents & POLLOUT) flush(c);
                if (c->fd != fds[k].fd || c->read_done) continue;
                if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) {
                    ssize_t got = recv(c->fd, buf, sizeof buf, 0);
                    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
                    if (got > 0) {
                        send_frame(DATA, c->number, buf, (uint32_t)got);
                    } else {
                        c->read_done = 1;
                        send_frame(EOF_, c->number, NULL, 0);
                        finish(c);
                    }
                }
            }
        }
    }
}

#include "observe.c"
#include "tarout.c"

/* -- files ------------------------------------------------------------------------------ */

static int make_dirs(int argc, char **argv) {
    int status = 0;
    for (int i = 0; i < argc; i++) {
        char path[4096];
        if (snprintf(path, sizeof path, "%s", argv[i]) >= (int)sizeof path) {
            dprintf(2, "hangar-helper mkdir: path too long\n");
            return 1;
        }
        for (char *p = path + 1;; p++) {
            if (*p == '/' || *p == '\0') {
                char saved = *p;
                *p = '\0';
                if (mkdir(path, 0755) != 0 && errno != EEXIST) {
                    dprintf(2, "hangar-helper mkdir: %s: %s\n", path, strerror(errno));
                    status = 1;
                    break;
                }
                *p = saved;
                if (!saved) break;
            }
        }
        struct stat st;
        if (!status && (lstat(argv[i], &st) != 0 || !S_ISDIR(st.st_mode))) {
            dprintf(2, "hangar-helper mkdir: %s is not a folder\n", argv[i]);
            status = 1;
        }
    }
    return status;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    if (flag == FTW_DP) return rmdir(path) == 0 ? 0 : -1;
    return unlink(path) == 0 ? 0 : -1;
}

static int remove_paths(int argc, char **argv) {
    int status = 0;
    for (int i = 0; i < argc; i++) {
        struct stat st;
        if (lstat(argv[i], &st) != 0) continue;
        int ok = S_ISDIR(st.st_mode) ? nftw(argv[i], remove_entry, 16, FTW_DEPTH | FTW_PHYS)
                                     : unlink(argv[i]);
        if (ok != 0) {
            dprintf(2, "hangar-helper remove: %s: %s\n", argv[i], strerror(errno));
            status = 1;
        }
    }
    return status;
}

/* A regular file's first CAT_LIMIT bytes: never a FIFO, socket or device (opened without
 * waiting, refused unless regular), never more than the limit. */
#define CAT_LIMIT (1 << 20)
static int cat(int argc, char **argv) {
    if (argc != 1) return 2;
    int fd = open(argv[0], O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return fail(argv[0]);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        dprintf(2, "hangar-helper cat: %s is not a regular file\n", argv[0]);
        return 1;
    }
    char buf[CHUNK];
    ssize_t n = 0;
    size_t total = 0;
    while (total < CAT_LIMIT && (n = read(fd, buf, sizeof buf)) > 0) {
        size_t keep = (size_t)n > CAT_LIMIT - total ? CAT_LIMIT - total : (size_t)n;
        write_all(1, buf, keep);
        total += keep;
    }
    close(fd);
    return n < 0 ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        dprintf(2, "usage: hangar-helper keeper|timeout|forward|mkdir|remove|ids|cat|observe|tar ...\n");
        return 2;
    }
    const char *what = argv[1];
    argc -= 2;
    argv += 2;
    if (!strcmp(what, "keeper")) return keeper(argc, argv);
    if (!strcmp(what, "timeout")) return timeout(argc, argv);
    if (!strcmp(what, "forward")) return forward(argc, argv);
    if (!strcmp(what, "mkdir")) return make_dirs(argc, argv);
    if (!strcmp(what, "remove")) return remove_paths(argc, argv);
    if (!strcmp(what, "cat")) return cat(argc, argv);
    if (!strcmp(what, "observe")) return observe(argc, argv);
    if (!strcmp(what, "tar")) return tar_out(argc, argv);
    if (!strcmp(what, "ids")) {
        printf("%u %u\n", (unsigned)getuid(), (unsigned)getgid());
        return 0;
    }
    dprintf(2, "hangar-helper: no command %s\n", what);
    return 2;
}
