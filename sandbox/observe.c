/* hangar-helper observe: a verifier's processes run and watched (included by helper.c).
 *
 *   hangar-helper observe [-k KILL_AFTER] TIMEOUT PROGRAM ARGS...   (settings on stdin)
 *
 * The test script runs as this process's child, traced (ptrace) under a seccomp filter
 * that stops it, and every process it makes, at each syscall that opens, runs, maps as code,
 * renames or links a file, or connects a socket. What they did is written as a record
 * (below) that hangar's host reads to decide whether the judge's own machinery used what
 * the agent changed (hangar/kinds/execution/images/takeover.py: the rules live there, not here).
 * This program only records, and enforces three things as they happen:
 *
 * - a process that ran the agent's code (executed or mapped a file the agent changed, or
 *   read one as code or configuration) is refused a connection to the guarded ports (the
 *   verifier's egress proxy): the agent's code never gets the verifier's network;
 * - a FIFO, socket or device the agent made (or linked to) is never opened: the open fails
 *   with ENXIO, so nothing the agent left can stall the verifier in an open;
 * - the filter refuses what would escape the watch: ptrace and reading or writing another
 *   process's memory, io_uring (opens without a syscall), new seccomp filters, new
 *   namespaces, other architectures' syscalls, and signals to this process.
 *
 * Settings (stdin, one per line, values percent-encoded): `nonce HEX`, `out DIR` (the
 * record goes to DIR/observed-NONCE, made after every traced process has ended, so none
 * can forge it), `tests DIR`, `work DIR`, `home DIR`, `path DIRS` (the PATH the image's
 * programs are looked up on), `guard PORT`, `mark TEXT` (a part of a path whose first
 * opening by a process is recorded), `markers DIR` (hangar's start-up mark for Python, see
 * on_marker), and `changed PATH` lines (every file the agent added or changed, the
 * workspace's included; `changed DIR/`: everything under DIR).
 *
 * The record: one event per line, fields separated by spaces, paths percent-encoded.
 *   S pid                          the test script's process
 *   F pid creator                  a new process
 *   E pid requested exe loader via alts   a program ran (via: s when the requested path
 *                                  went through a link the agent made; alts: where the
 *                                  same name is on PATH)
 *   O pid how path requested       an open that matters: how is r (read), m (a marker: the
 *                                  first test file or workspace file the process opened)
 *   C pid path hex                 the first bytes of a changed .pth or entry_points.txt
 *   L pid path                     a changed file mapped as code
 *   R pid path                     a special file the agent made, refused
 *   T pid why                      the process ran the agent's code from here on
 *   N pid address                  a connection refused to a process that ran agent code
 *   W pid path                     a file the agent's code wrote while the tests ran
 *   J pid path                     a changed file the judge wrote over (no longer the agent's)
 *   B pid syscall path             a syscall still in progress at the deadline
 *   X status | D | Z key=value...  the script's end, the deadline, the summary
 */
#include <dirent.h>
#include <elf.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>

#if defined(__x86_64__)
#define OBS_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define OBS_ARCH AUDIT_ARCH_AARCH64
#else
#error "hangar-helper observe: x86_64 and aarch64 only"
#endif

#define OBS_PATH 4096
#define OBS_RECORD_CAP (64u << 20)
#define OBS_CAPTURE 16384
#define OBS_TASKS 65536
#define OBS_GUARDS 8
#define OBS_MARKS 8
#define OBS_WRITTEN (1u << 20) /* paths the agent's code wrote, remembered at most */
#define OBS_ROOTS 64

/* The kernel's PTRACE_GET_SYSCALL_INFO (Linux 5.3), declared here as every libc spells it
 * differently. */
#define OBS_GET_SYSCALL_INFO 0x420e
#define OBS_INFO_EXIT 2
#define OBS_INFO_SECCOMP 3
typedef struct {
    unsigned char op;
    unsigned char pad[3];
    unsigned int arch;
    unsigned long long instruction_pointer, stack_pointer;
    union {
        struct {
            unsigned long long nr, args[6];
        } entry;
        struct {
            long long rval;
            unsigned char is_error;
        } exit;
        struct {
            unsigned long long nr, args[6];
            unsigned int ret_data;
        } seccomp;
    };
} SyscallInfo;
#ifndef NT_ARM_SYSTEM_CALL
#define NT_ARM_SYSTEM_CALL 0x404
#endif

typedef struct {
    char **items;
    size_t size, cap;
} List;

typedef struct { /* a hash set of strings */
    char **slots;
    size_t size, cap;
} Set;

typedef struct Proc {
    pid_t pid;       /* the process (thread group) */
    int refs;
    int tainted;
    int shell;       /* the test script's shell, or a fork of it that has run nothing yet */
    int tests_seen;  /* 1: its first test file was recorded; 2: its first .py one */
    unsigned marks;  /* which of the `mark` settings it met (since the last exec) */
    int started;     /* Python's start-up is over (hangar's sitecustomize said so) */
    char *roots[OBS_ROOTS]; /* the interpreter's import roots, as it said before that */
    int nroots;
    Set tops;        /* top-level names whose namesakes were looked up */
} Proc;

typedef struct {
    pid_t tid;       /* 0: free */
    Proc *proc;
    int ready;       /* its creator's event seen (a new task waits for it) */
    int fresh;       /* its first stop (a SIGSTOP) is still to come */
    int stopped;     /* held at its first stop until its creator is known */
    int in_syscall;  /* resumed to the exit of a syscall */
    long nr;
    int deny;        /* errno set at the syscall's exit */
    int flags;
    char *requested; /* the open's requested path */
    int via;         /* the requested path went through a link the agent made */
    char *exec_path; /* the requested path of the last exec */
    int exec_via;
    int mem;         /* /proc/TID/mem, or -1 */
} Task;

static struct {
    List changed;     /* sorted */
    List folders;     /* folders whose every path is changed (`changed DIR/`), sorted */
    Set written;      /* written by the agent's code during the run */
    Set rewritten;    /* changed files the judge wrote over */
    char *tests, *home, *out, *nonce, *path, *markers;
    int guards[OBS_GUARDS], nguards;
    char *marks[OBS_MARKS];
    int nmarks;
    Task tasks[OBS_TASKS];
    size_t ntasks;
    char *record;
    size_t len, cap;
    unsigned long events, dropped;
    pid_t root, self, self_group;
    int root_status, root_done;
} obs;

static volatile sig_atomic_t obs_alarm;

/* -- small things ----------------------------------------------------------------------- */

static void *obs_alloc(size_t size) {
    void *p = calloc(1, size ? size : 1);
    if (!p) {
        dprintf(2, "hangar-helper observe: out of memory\n");
        _exit(4);
    }
    return p;
}

static char *obs_strdup(const char *s) {
    char *p = obs_alloc(strlen(s) + 1);
    strcpy(p, s);
    return p;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decoding in place. */
static void unquote(char *s) {
    char *w = s;
    for (char *r = s; *r; r++) {
        if (*r == '%' && hexval(r[1]) >= 0 && hexval(r[2]) >= 0) {
            *w++ = (char)(hexval(r[1]) * 16 + hexval(r[2]));
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}

/* A path as the host's lists spell it: every byte that is not part of valid UTF-8 becomes
 * U+FFFD, as the engine's JSON does (so a name of invalid UTF-8 cannot miss its entry). */
static void canonical(const char *in, char *out, size_t size) {
    size_t o = 0;
    const unsigned char *s = (const unsigned char *)in;
    while (*s && o + 4 < size) {
        int n = 0;
        if (*s < 0x80) n = 1;
        else if ((*s & 0xE0) == 0xC0 && *s >= 0xC2) n = 2;
        else if ((*s & 0xF0) == 0xE0) n = 3;
        else if ((*s & 0xF8) == 0xF0 && *s <= 0xF4) n = 4;
        int ok = n > 0;
        for (int i = 1; ok && i < n; i++) ok = (s[i] & 0xC0) == 0x80;
        if (ok && n == 3 && ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0))) ok = 0;
        if (ok && n == 4 && ((s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90))) ok = 0;
        if (ok) {
            memcpy(out + o, s, (size_t)n);
            o += (size_t)n;
            s += n;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            s += 1;
        }
    }
    out[o] = '\0';
}

/* `path` made absolute against `base` and normalised by its text (no link followed). */
static void normalise(const char *base, const char *path, char *out, size_t size) {
    char joined[2 * OBS_PATH + 2];
    if (path[0] == '/') snprintf(joined, sizeof joined, "%s", path);
    else snprintf(joined, sizeof joined, "%s/%s", base, path);
    size_t o = 0;
    out[o++] = '/';
    char *save = NULL;
    for (char *part = strtok_r(joined, "/", &save); part; part = strtok_r(NULL, "/", &save)) {
        if (!strcmp(part, ".")) continue;
        if (!strcmp(part, "..")) {
            while (o > 1 && out[o - 1] != '/') o--;
            if (o > 1) o--;
            continue;
        }
        size_t n = strlen(part);
        if (o + n + 2 >= size) break;
        if (o > 1) out[o++] = '/';
        memcpy(out + o, part, n);
        o += n;
    }
    out[o] = '\0';
}

static int under(const char *path, const char *dir) {
    size_t n = strlen(dir);
    return dir[0] && !strncmp(path, dir, n) && (path[n] == '/' || (n == 1 && dir[0] == '/'));
}

static int ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

/* -- sets ------------------------------------------------------------------------------- */

static unsigned long hash(const char *s) {
    unsigned long h = 1469598103934665603UL;
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211UL;
    return h;
}

static char **set_slot(Set *set, const char *s) {
    size_t i = hash(s) & (set->cap - 1);
    while (set->slots[i] && strcmp(set->slots[i], s)) i = (i + 1) & (set->cap - 1);
    return &set->slots[i];
}

static int set_has(Set *set, const char *s) { return set->cap && *set_slot(set, s) != NULL; }

static void set_remove(Set *set, const char *s) {
    if (!set->cap) return;
    char **slot = set_slot(set, s);
    if (!*slot) return;
    /* removal by re-inserting the rest of the cluster */
    size_t i = (size_t)(slot - set->slots);
    free(*slot);
    set->slots[i] = NULL;
    set->size--;
    for (size_t j = (i + 1) & (set->cap - 1); set->slots[j]; j = (j + 1) & (set->cap - 1)) {
        char *moved = set->slots[j];
        set->slots[j] = NULL;
        *set_slot(set, moved) = moved;
    }
}

static void set_add(Set *set, const char *s) {
    if (set->size * 2 >= set->cap) {
        Set bigger = {obs_alloc(sizeof(char *) * (set->cap ? set->cap * 2 : 64)), 0,
                      set->cap ? set->cap * 2 : 64};
        for (size_t i = 0; i < set->cap; i++)
            if (set->slots[i]) {
                *set_slot(&bigger, set->slots[i]) = set->slots[i];
                bigger.size++;
            }
        free(set->slots);
        *set = bigger;
    }
    char **slot = set_slot(set, s);
    if (!*slot) {
        *slot = obs_strdup(s);
        set->size++;
    }
}

static int by_text(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A path the agent's code wrote: the agent's from now on. Past OBS_WRITTEN of them the
 * record is not whole (a pass cannot stand on it). */
static void remember_written(const char *path) {
    set_remove(&obs.rewritten, path);
    if (obs.written.size >= OBS_WRITTEN) {
        obs.dropped++;
        return;
    }
    set_add(&obs.written, path);
}

/* Whether the agent changed `path` (canonical): added or changed before the tests, or
 * written by its code since; not when the judge wrote over it. */
static int agent_made(const char *path) {
    if (set_has(&obs.rewritten, path)) return 0;
    if (set_has(&obs.written, path)) return 1;
    const char *key = path;
    if (obs.changed.size &&
        bsearch(&key, obs.changed.items, obs.changed.size, sizeof(char *), by_text) != NULL)
        return 1;
    if (!obs.folders.size) return 0;
    char prefix[OBS_PATH];
    key = prefix;
    for (size_t i = 1; path[i] && i + 1 < sizeof prefix; i++) {
        if (path[i] != '/') continue;
        memcpy(prefix, path, i + 1);
        prefix[i + 1] = '\0';
        if (bsearch(&key, obs.folders.items, obs.folders.size, sizeof(char *), by_text)) return 1;
    }
    return 0;
}

/* Whether the requested (normalised, canonical) path went through a link the agent made:
 * one of its folders is a changed entry that is a symbolic link. */
static int through_agent_link(const char *path) {
    char prefix[OBS_PATH];
    size_t n = strlen(path);
    for (size_t i = 1; i < n && i < sizeof prefix; i++) {
        if (path[i] != '/') continue;
        memcpy(prefix, path, i);
        prefix[i] = '\0';
        struct stat st;
        if (agent_made(prefix) && lstat(prefix, &st) == 0 && S_ISLNK(st.st_mode)) return 1;
    }
    struct stat st;
    return agent_made(path) && lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

/* -- the record ------------------------------------------------------------------------- */

static void put(const char *data, size_t size) {
    if (obs.len + size > OBS_RECORD_CAP) {
        obs.dropped++;
        return;
    }
    if (obs.len + size > obs.cap) {
        size_t cap = obs.cap ? obs.cap : 65536;
        while (cap < obs.len + size) cap *= 2;
        char *grown = realloc(obs.record, cap);
        if (!grown) _exit(4);
        obs.record = grown;
        obs.cap = cap;
    }
    memcpy(obs.record + obs.len, data, size);
    obs.len += size;
}

static void put_quoted(const char *s) {
    char buf[3 * OBS_PATH + 4];
    size_t o = 0;
    if (!*s) s = "-";
    for (const unsigned char *p = (const unsigned char *)s; *p && o + 4 < sizeof buf; p++) {
        if (*p > 0x20 && *p < 0x7f && *p != '%') buf[o++] = (char)*p;
        else o += (size_t)snprintf(buf + o, 4, "%%%02X", *p);
    }
    put(" ", 1);
    put(buf, o);
}

/* One event: its letter and pid, then each field (quoted), a newline. */
static void event(char kind, pid_t pid, int fields, ...) {
    char head[32];
    int n = snprintf(head, sizeof head, "%c %d", kind, (int)pid);
    size_t before = obs.len;
    unsigned long dropped = obs.dropped;
    put(head, (size_t)n);
    va_list args;
    va_start(args, fields);
    for (int i = 0; i < fields; i++) put_quoted(va_arg(args, const char *));
    va_end(args);
    put("\n", 1);
    if (obs.dropped != dropped) obs.len = before; /* whole lines only */
    else obs.events++;
}

/* -- tasks ------------------------------------------------------------------------------ */

static Task *task(pid_t tid, int create) {
    size_t i = (size_t)tid * 2654435761u % OBS_TASKS;
    for (size_t k = 0; k < OBS_TASKS; k++, i = (i + 1) % OBS_TASKS) {
        if (obs.tasks[i].tid == tid) return &obs.tasks[i];
        if (obs.tasks[i].tid == 0) {
            if (!create) return NULL;
            memset(&obs.tasks[i], 0, sizeof(Task));
            obs.tasks[i].tid = tid;
            obs.tasks[i].mem = -1;
            obs.ntasks++;
            return &obs.tasks[i];
        }
    }
    return NULL; /* full: the pids limit keeps it far off */
}

static void set_clear(Set *set) {
    for (size_t i = 0; i < set->cap; i++) free(set->slots[i]);
    free(set->slots);
    memset(set, 0, sizeof *set);
}

/* What a process knows of its program: forgotten when it runs another. */
static void proc_reset(Proc *p) {
    for (int i = 0; i < p->nroots; i++) free(p->roots[i]);
    p->nroots = 0;
    p->started = 0;
    p->tests_seen = 0;
    p->marks = 0;
    p->shell = 0;
    set_clear(&p->tops);
}

static void proc_release(Proc *p) {
    if (p && --p->refs == 0) {
        proc_reset(p);
        free(p);
    }
}

static void task_forget(Task *t) {
    if (t->mem >= 0) close(t->mem);
    free(t->requested);
    free(t->exec_path);
    proc_release(t->proc);
    /* open addressing: re-insert the rest of the cluster */
    size_t i = (size_t)(t - obs.tasks);
    memset(t, 0, sizeof(Task));
    obs.ntasks--;
    for (size_t j = (i + 1) % OBS_TASKS; obs.tasks[j].tid; j = (j + 1) % OBS_TASKS) {
        Task moved = obs.tasks[j];
        obs.tasks[j].tid = 0;
        obs.ntasks--;
        Task *slot = task(moved.tid, 1);
        *slot = moved;
    }
}

static pid_t tgid_of(pid_t tid) { /* read while the task is stopped */
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)tid);
    FILE *f = fopen(path, "re");
    pid_t found = tid;
    if (!f) return found;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "Tgid:", 5)) {
            found = (pid_t)atoi(line + 5);
            break;
        }
    fclose(f);
    return found;
}

/* Bytes of a traced task's memory (its /proc/TID/mem, opened once per program). */
static ssize_t peek(Task *t, unsigned long address, void *buf, size_t size) {
    if (t->mem < 0) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/mem", (int)t->tid);
        t->mem = open(path, O_RDONLY | O_CLOEXEC);
        if (t->mem < 0) return -1;
    }
    return pread(t->mem, buf, size, (off_t)address);
}

/* A NUL-terminated string of the task's memory (one page at a time). */
static int peek_string(Task *t, unsigned long address, char *out, size_t size) {
    size_t got = 0;
    while (got + 1 < size) {
        size_t page = 4096 - ((address + got) & 4095);
        if (page > size - 1 - got) page = size - 1 - got;
        ssize_t n = peek(t, address + got, out + got, page);
        if (n <= 0) return -1;
        for (ssize_t i = 0; i < n; i++)
            if (out[got + (size_t)i] == '\0') return 0;
        got += (size_t)n;
    }
    out[size - 1] = '\0';
    return -1; /* longer than a path can be */
}

static int link_of(pid_t tid, const char *what, char *out, size_t size) {
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)tid, what);
    ssize_t n = readlink(path, out, size - 1);
    if (n < 0) return -1;
    out[n] = '\0';
    return 0;
}

/* The folder a relative path of `dirfd` starts from. */
static int base_of(pid_t tid, long dirfd, char *out, size_t size) {
    if ((int)dirfd == AT_FDCWD) return link_of(tid, "cwd", out, size);
    char what[32];
    snprintf(what, sizeof what, "fd/%d", (int)dirfd);
    return link_of(tid, what, out, size);
}

static void taint(Task *t, const char *why, const char *path) {
    if (t->proc->tainted) return;
    t->proc->tainted = 1;
    event('T', t->proc->pid, 2, why, path);
}

/* -- the filter ------------------------------------------------------------------------- */

#define OP(x) ((struct sock_filter)x)
#define LD_NR OP(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)))
#define LD_ARG(i) OP(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[i])))
#define RET(v) OP(BPF_STMT(BPF_RET | BPF_K, (v)))
#define JUMP(how, k, yes, no) OP(BPF_JUMP(BPF_JMP | how | BPF_K, (k), (yes), (no)))
#define ERRNO(e) RET(SECCOMP_RET_ERRNO | ((e) & SECCOMP_RET_DATA))

typedef struct {
    struct sock_filter code[512];
    unsigned short n;
    int overflow; /* more than fits: never installed */
} Filter;

static void emit_op(Filter *f, struct sock_filter op) {
    if (f->n < 512) f->code[f->n++] = op;
    else f->overflow = 1;
}

/* if nr == `nr`: `then` (one statement), else on */
static void on_nr(Filter *f, long nr, struct sock_filter then) {
    emit_op(f, JUMP(BPF_JEQ, (unsigned)nr, 0, 1));
    emit_op(f, then);
}

/* if nr == `nr` and args[arg] (its low word) passes `test` with `value` (BPF_JEQ: equals
 * it; BPF_JSET: has those bits): `then`; reloads nr after */
static void on_arg(Filter *f, long nr, int arg, int test, unsigned value, struct sock_filter then) {
    emit_op(f, JUMP(BPF_JEQ, (unsigned)nr, 0, 4));
    emit_op(f, LD_ARG(arg));
    emit_op(f, OP(BPF_JUMP(BPF_JMP | test | BPF_K, value, 0, 1)));
    emit_op(f, then);
    emit_op(f, LD_NR);
}

static void build_filter(Filter *f, pid_t tracer, pid_t group, pid_t parent) {
    struct sock_filter trace = RET(SECCOMP_RET_TRACE), deny = ERRNO(EPERM);
    emit_op(f, OP(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch))));
    emit_op(f, JUMP(BPF_JEQ, OBS_ARCH, 1, 0));
    emit_op(f, ERRNO(ENOSYS)); /* another architecture's syscalls */
    emit_op(f, LD_NR);
#if defined(__x86_64__)
    emit_op(f, JUMP(BPF_JGE, 0x40000000u, 0, 1));
    emit_op(f, ERRNO(ENOSYS)); /* x32 */
#endif
    /* what is watched */
    long watched[] = {
        SYS_openat, SYS_execve, SYS_execveat, SYS_connect, SYS_renameat, SYS_renameat2,
        SYS_linkat, SYS_symlinkat, SYS_mknodat, SYS_truncate,
#ifdef SYS_openat2
        SYS_openat2,
#endif
#ifdef SYS_open
        SYS_open, SYS_creat, SYS_rename, SYS_link, SYS_symlink, SYS_mknod,
#endif
    };
    for (size_t i = 0; i < sizeof watched / sizeof *watched; i++) on_nr(f, watched[i], trace);
    /* code mapped from a file (not an anonymous JIT page) */
    emit_op(f, JUMP(BPF_JEQ, (unsigned)SYS_mmap, 0, 6));
    emit_op(f, LD_ARG(2));
    emit_op(f, JUMP(BPF_JSET, PROT_EXEC, 0, 3));
    emit_op(f, LD_ARG(3));
    emit_op(f, JUMP(BPF_JSET, MAP_ANONYMOUS, 1, 0));
    emit_op(f, trace);
    emit_op(f, LD_NR);
    on_arg(f, SYS_sendto, 3, BPF_JSET, MSG_FASTOPEN, trace);
    on_arg(f, SYS_sendmsg, 2, BPF_JSET, MSG_FASTOPEN, trace);
    /* what would escape the watch */
    long refused[] = {
        SYS_ptrace, SYS_process_vm_readv, SYS_process_vm_writev, SYS_io_uring_setup,
        SYS_io_uring_enter, SYS_io_uring_register, SYS_seccomp, SYS_unshare, SYS_setns,
        SYS_pidfd_getfd, SYS_pidfd_send_signal, SYS_open_by_handle_at, SYS_kcmp,
        SYS_userfaultfd,
#ifdef SYS_uselib
        SYS_uselib,
#endif
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) on_nr(f, refused[i], deny);
    on_nr(f, SYS_clone3, ERRNO(ENOSYS)); /* libc falls back to clone */
    on_arg(f, SYS_clone, 0, BPF_JSET,
            CLONE_NEWNS | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
                CLONE_NEWUTS | CLONE_NEWCGROUP,
            deny);
    on_arg(f, SYS_prctl, 0, BPF_JEQ, PR_SET_SECCOMP, deny);
    on_arg(f, SYS_prctl, 0, BPF_JEQ, PR_SET_DUMPABLE, ERRNO(0)); /* stays readable to the watch */
    /* no signal reaches this process */
    long signalling[] = {SYS_kill, SYS_tkill, SYS_tgkill, SYS_rt_sigqueueinfo,
                         SYS_rt_tgsigqueueinfo, SYS_pidfd_open};
    for (size_t i = 0; i < sizeof signalling / sizeof *signalling; i++) {
        on_arg(f, signalling[i], 0, BPF_JEQ, (unsigned)tracer, deny);
        on_arg(f, signalling[i], 0, BPF_JEQ, (unsigned)-tracer, deny);
        on_arg(f, signalling[i], 0, BPF_JEQ, (unsigned)-group, deny);
        on_arg(f, signalling[i], 0, BPF_JEQ, (unsigned)parent, deny); /* the timeout around it */
    }
    on_arg(f, SYS_kill, 0, BPF_JEQ, (unsigned)-1, deny);
    emit_op(f, RET(SECCOMP_RET_ALLOW));
}

/* -- denying a syscall ------------------------------------------------------------------ */

/* Skip the syscall the task is stopped at (seccomp stop); its result is set at the exit. */
static void skip_syscall(Task *t) {
#if defined(__x86_64__)
    ptrace(PTRACE_POKEUSER, t->tid, offsetof(struct user_regs_struct, orig_rax), -1L);
#else
    int nr = -1;
    struct iovec io = {&nr, sizeof nr};
    ptrace(PTRACE_SETREGSET, t->tid, NT_ARM_SYSTEM_CALL, &io);
#endif
}

static void set_result(Task *t, long value) {
#if defined(__x86_64__)
    ptrace(PTRACE_POKEUSER, t->tid, offsetof(struct user_regs_struct, rax), value);
#else
    struct user_regs_struct regs;
    struct iovec io = {&regs, sizeof regs};
    if (ptrace(PTRACE_GETREGSET, t->tid, NT_PRSTATUS, &io) == 0) {
        regs.regs[0] = (unsigned long long)value;
        ptrace(PTRACE_SETREGSET, t->tid, NT_PRSTATUS, &io);
    }
#endif
}

static void deny_now(Task *t, int error) {
    skip_syscall(t);
    t->deny = error;
}

/* -- what each watched syscall means ---------------------------------------------------- */

static const char *const CODE_SUFFIXES[] = {
    ".py", ".pyc", ".pyo", ".pth", ".so", ".zip", ".egg", ".whl", ".sh", ".bash", ".js",
    ".mjs", ".cjs", ".node", ".pl", ".pm", ".rb", ".php", ".lua", ".jar", ".class", NULL};

/* Whether reading the changed file at fd `fd` of `t` is reading code or configuration: a
 * name code goes by, a program's or script's first bytes, or a place of configuration. */
static int code_or_config(Task *t, const char *path, int fd) {
    for (int i = 0; CODE_SUFFIXES[i]; i++)
        if (ends_with(path, CODE_SUFFIXES[i])) return 1;
    if (strstr(path, ".so.")) return 1;
    if (under(path, "/etc") || under(path, "/usr/local/etc") || (obs.home && under(path, obs.home)))
        return 1;
    char proc_fd[64];
    snprintf(proc_fd, sizeof proc_fd, "/proc/%d/fd/%d", (int)t->tid, fd);
    int f = open(proc_fd, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (f < 0) return 1;
    unsigned char head[4] = {0};
    ssize_t n = read(f, head, sizeof head);
    close(f);
    if (n >= 2 && head[0] == '#' && head[1] == '!') return 1;
    if (n == 4 && !memcmp(head, "\x7f" "ELF", 4)) return 1;
    if (n == 4 && !memcmp(head, "PK\x03\x04", 4)) return 1;
    return 0;
}

/* Whether a .pth file's text has a line Python runs (one that starts with `import`), or
 * is too long to tell: a .pth of paths only is not code. */
static int pth_runs(const unsigned char *text, ssize_t n) {
    if (n > OBS_CAPTURE) return 1;
    for (ssize_t i = 0; i < n; i++) {
        if (i && text[i - 1] != '\n') continue;
        if (n - i >= 7 && !memcmp(text + i, "import", 6) && (text[i + 6] == ' ' || text[i + 6] == '\t'))
            return 1;
    }
    return 0;
}

/* The first bytes of a changed file whose text the host reads (a .pth's lines, a
 * distribution's entry points), read when it was opened. For a .pth, whether it is code
 * (1 or 0); -1 for any other file. */
static int capture(Task *t, const char *path, int fd) {
    const char *name = strrchr(path, '/');
    name = name ? name + 1 : path;
    int pth = ends_with(name, ".pth");
    if (!pth && strcmp(name, "entry_points.txt")) return -1;
    char proc_fd[64];
    snprintf(proc_fd, sizeof proc_fd, "/proc/%d/fd/%d", (int)t->tid, fd);
    int f = open(proc_fd, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (f < 0) return pth ? 1 : -1;
    static unsigned char buf[OBS_CAPTURE + 1];
    ssize_t n = read(f, buf, sizeof buf);
    close(f);
    if (n < 0) return pth ? 1 : -1;
    static char hex[2 * (OBS_CAPTURE + 1) + 1];
    for (ssize_t i = 0; i < n; i++) sprintf(hex + 2 * i, "%02x", buf[i]);
    hex[2 * n] = '\0';
    event('C', t->proc->pid, 2, path, n ? hex : "-");
    return pth ? pth_runs(buf, n) : -1;
}

static int open_flags(Task *t, SyscallInfo *info, unsigned long *path_arg,
                      long *dirfd) {
    long nr = (long)info->seccomp.nr;
    *dirfd = AT_FDCWD;
#ifdef SYS_open
    if (nr == SYS_open) {
        *path_arg = info->seccomp.args[0];
        return (int)info->seccomp.args[1];
    }
    if (nr == SYS_creat) {
        *path_arg = info->seccomp.args[0];
        return O_CREAT | O_WRONLY | O_TRUNC;
    }
#endif
    *dirfd = (long)info->seccomp.args[0];
    *path_arg = info->seccomp.args[1];
#ifdef SYS_openat2
    if (nr == SYS_openat2) {
        struct open_how how = {0};
        if (peek(t, info->seccomp.args[2], &how, sizeof how) < (ssize_t)sizeof(how.flags)) return 0;
        return (int)how.flags;
    }
#endif
    return (int)info->seccomp.args[2];
}

/* The absolute, normalised, canonical form of a path argument. */
static int requested_path(Task *t, unsigned long address, long dirfd, char *out, size_t size) {
    char raw[OBS_PATH], base[OBS_PATH] = "/", plain[OBS_PATH];
    if (peek_string(t, address, raw, sizeof raw) != 0) return -1;
    if (raw[0] != '/' && base_of(t->tid, dirfd, base, sizeof base) != 0) return -1;
    normalise(base, raw, plain, sizeof plain);
    /* /proc/self is the task's, not this process's */
    char own[OBS_PATH];
    const char *rest = NULL, *mine = NULL;
    char self[64], thread[96];
    snprintf(self, sizeof self, "/proc/%d", (int)t->proc->pid);
    snprintf(thread, sizeof thread, "/proc/%d/task/%d", (int)t->proc->pid, (int)t->tid);
    if (!strncmp(plain, "/proc/self", 10) && (plain[10] == '/' || !plain[10]))
        rest = plain + 10, mine = self;
    else if (!strncmp(plain, "/proc/thread-self", 17) && (plain[17] == '/' || !plain[17]))
        rest = plain + 17, mine = thread;
    if (rest) {
        snprintf(own, sizeof own, "%s%s", mine, rest);
        snprintf(plain, sizeof plain, "%s", own);
    }
    canonical(plain, out, size);
    return 0;
}

/* For a changed file under one of the interpreter's import roots: where a module of the
 * same top-level name is on the roots searched after it (the image's module it hides).
 * Looked up once per name and program. */
static void module_namesakes(Proc *p, const char *path, char *out, size_t size) {
    out[0] = '\0';
    int at = -1;
    size_t best = 0;
    for (int i = 0; i < p->nroots; i++) {
        size_t n = strlen(p->roots[i]);
        if (n > best && under(path, p->roots[i])) at = i, best = n;
    }
    if (at < 0) return;
    char name[256];
    const char *top = path + best + (best > 1);
    size_t n = strcspn(top, "/");
    if (n >= sizeof name) return;
    memcpy(name, top, n);
    name[n] = '\0';
    if (!top[n]) name[strcspn(name, ".")] = '\0'; /* a module file: its name before the dots */
    if (!name[0] || set_has(&p->tops, name)) return;
    set_add(&p->tops, name);
    size_t o = 0, len = strlen(name);
    for (int i = at + 1; i < p->nroots; i++) {
        DIR *dir = opendir(p->roots[i]);
        if (!dir) continue;
        struct dirent *entry;
        int scanned = 0;
        while ((entry = readdir(dir)) && scanned++ < 100000) {
            const char *e = entry->d_name;
            int same = !strcmp(e, name) ||
                       (!strncmp(e, name, len) && e[len] == '.' &&
                        (!strcmp(e + len, ".py") || ends_with(e, ".so") || ends_with(e, ".pyc")));
            if (!same) continue;
            char found[OBS_PATH];
            snprintf(found, sizeof found, "%s/%s", p->roots[i], e);
            size_t m = strlen(found);
            if (o + m + 2 >= size) break;
            if (o) out[o++] = ':';
            memcpy(out + o, found, m);
            o += m;
            out[o] = '\0';
        }
        closedir(dir);
    }
}

static int special(mode_t mode) {
    return S_ISFIFO(mode) || S_ISSOCK(mode) || S_ISCHR(mode) || S_ISBLK(mode);
}

/* What hangar's sitecustomize tells by the names it opens in its folder (none of which
 * exists): each import root of the interpreter (`root/HEX`), then that start-up is over
 * (`started`). Only the first telling of a program counts: nothing that runs after it
 * (the tests, the agent's code they import) can change what was said. */
static int on_marker(Task *t, const char *path) {
    if (!obs.markers || !under(path, obs.markers)) return 0;
    const char *rest = path + strlen(obs.markers) + 1;
    Proc *p = t->proc;
    if (p->started) return 1;
    if (!strncmp(rest, "root/", 5) && p->nroots < OBS_ROOTS) {
        char root[OBS_PATH], plain[OBS_PATH];
        size_t n = 0;
        for (const char *h = rest + 5; h[0] && h[1] && n + 1 < sizeof root; h += 2) {
            if (hexval(h[0]) < 0 || hexval(h[1]) < 0) break;
            root[n++] = (char)(hexval(h[0]) * 16 + hexval(h[1]));
        }
        root[n] = '\0';
        if (root[0] != '/') return 1;
        normalise("/", root, plain, sizeof plain);
        canonical(plain, root, sizeof root);
        p->roots[p->nroots++] = obs_strdup(root);
        event('P', p->pid, 1, root);
    } else if (!strcmp(rest, "started")) {
        p->started = 1;
        event('O', p->pid, 3, "m", path, "-");
    }
    return 1;
}

static void on_open_entry(Task *t, SyscallInfo *info) {
    unsigned long address;
    long dirfd;
    int flags = open_flags(t, info, &address, &dirfd);
    char path[OBS_PATH];
    if (requested_path(t, address, dirfd, path, sizeof path) != 0) return;
    if (on_marker(t, path)) return;
    t->flags = flags;
    free(t->requested);
    t->requested = obs_strdup(path);
    t->via = through_agent_link(path);
    if (flags & O_PATH) return;
    struct stat st;
    int follow = !(flags & O_NOFOLLOW);
    if ((follow ? stat(path, &st) : lstat(path, &st)) == 0 && special(st.st_mode)) {
        char real[OBS_PATH] = "", canon[OBS_PATH] = "";
        if (realpath(path, real)) canonical(real, canon, sizeof canon);
        if (t->via || agent_made(path) || (canon[0] && agent_made(canon))) {
            event('R', t->proc->pid, 1, path);
            deny_now(t, ENXIO);
        }
    }
}

static void on_open_exit(Task *t, long result) {
    if (result < 0 || !t->requested) return;
    int fd = (int)result;
    char what[32], raw[OBS_PATH], path[OBS_PATH];
    snprintf(what, sizeof what, "fd/%d", fd);
    if (link_of(t->tid, what, raw, sizeof raw) != 0) return;
    canonical(raw, path, sizeof path);
    char proc_fd[64];
    snprintf(proc_fd, sizeof proc_fd, "/proc/%d/fd/%d", (int)t->tid, fd);
    struct stat st;
    if (stat(proc_fd, &st) != 0 || S_ISDIR(st.st_mode)) return;
    int acc = t->flags & O_ACCMODE, writes = acc != O_RDONLY || (t->flags & (O_CREAT | O_TRUNC));
    int made = agent_made(path) || t->via;
    pid_t pid = t->proc->pid;
    if (writes && S_ISREG(st.st_mode)) {
        if (t->proc->tainted) {
            if (!agent_made(path)) event('W', pid, 1, path);
            remember_written(path);
        } else if (made && !t->via && ((t->flags & O_TRUNC) || ((t->flags & O_CREAT) && (t->flags & O_EXCL)))) {
            event('J', pid, 1, path);
            set_add(&obs.rewritten, path);
            made = 0;
        }
    }
    if (acc == O_WRONLY || !S_ISREG(st.st_mode)) return;
    if (made) {
        char alts[OBS_PATH];
        module_namesakes(t->proc, path, alts, sizeof alts);
        event('O', pid, 3, "r", path, alts);
        int code = capture(t, path, fd); /* a .pth: whether it has lines Python runs */
        if (code < 0) code = t->proc->shell || code_or_config(t, path, fd);
        if (code) taint(t, "read", path);
        return;
    }
    if (under(path, obs.tests)) { /* its first test file, and its first test module */
        int seen = t->proc->tests_seen, now = seen | 1 | (ends_with(path, ".py") ? 2 : 0);
        if (now != seen) event('O', pid, 3, "m", path, "-");
        t->proc->tests_seen = now;
    }
    for (int i = 0; i < obs.nmarks; i++)
        if (!(t->proc->marks & (1u << i)) && strstr(path, obs.marks[i])) {
            t->proc->marks |= 1u << i;
            event('O', pid, 3, "m", path, "-");
        }
}

static void on_mmap(Task *t, SyscallInfo *info) {
    char what[32], raw[OBS_PATH], path[OBS_PATH];
    snprintf(what, sizeof what, "fd/%d", (int)info->seccomp.args[4]);
    if (link_of(t->tid, what, raw, sizeof raw) != 0) return;
    canonical(raw, path, sizeof path);
    if (!agent_made(path)) return;
    event('L', t->proc->pid, 1, path);
    taint(t, "mapped", path);
}

static void on_exec_entry(Task *t, SyscallInfo *info) {
    char path[OBS_PATH];
    long dirfd = AT_FDCWD;
    unsigned long address = info->seccomp.args[0];
    if ((long)info->seccomp.nr == SYS_execveat) {
        dirfd = (long)info->seccomp.args[0];
        address = info->seccomp.args[1];
    }
    free(t->exec_path);
    t->exec_path = NULL;
    if (requested_path(t, address, dirfd, path, sizeof path) == 0) {
        t->exec_path = obs_strdup(path);
        t->exec_via = through_agent_link(path);
    }
}

/* Where a program of this name is on the image's PATH (the namesakes of what ran). */
static void namesakes(const char *exe, char *out, size_t size) {
    const char *name = strrchr(exe, '/');
    name = name ? name + 1 : exe;
    size_t o = 0;
    out[0] = '\0';
    if (!obs.path) return;
    char dirs[OBS_PATH];
    snprintf(dirs, sizeof dirs, "%s", obs.path);
    char *save = NULL;
    for (char *dir = strtok_r(dirs, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        char candidate[OBS_PATH];
        struct stat st;
        snprintf(candidate, sizeof candidate, "%s/%s", dir, name);
        if (lstat(candidate, &st) != 0 || S_ISDIR(st.st_mode)) continue;
        size_t n = strlen(candidate);
        if (o + n + 2 >= size) break;
        if (o) out[o++] = ':';
        memcpy(out + o, candidate, n);
        o += n;
        out[o] = '\0';
    }
}

/* The dynamic loader a new program mapped (the first file mapping that is not the
 * program itself). */
static void loader_of(pid_t tid, const char *exe, char *out, size_t size) {
    char path[64], line[OBS_PATH + 128];
    out[0] = '\0';
    snprintf(path, sizeof path, "/proc/%d/maps", (int)tid);
    FILE *f = fopen(path, "re");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        char *file = strchr(line, '/');
        if (!file) continue;
        file[strcspn(file, "\n")] = '\0';
        if (strcmp(file, exe)) {
            canonical(file, out, size);
            break;
        }
    }
    fclose(f);
}

static void on_exec_event(Task *t) {
    char raw[OBS_PATH] = "", exe[OBS_PATH] = "?", loader[OBS_PATH] = "", alts[OBS_PATH];
    if (link_of(t->tid, "exe", raw, sizeof raw) == 0) canonical(raw, exe, sizeof exe);
    loader_of(t->tid, raw, loader, sizeof loader);
    if (t->mem >= 0) close(t->mem);
    t->mem = -1;
    Proc *p = t->proc;
    proc_reset(p);
    const char *requested = t->exec_path ? t->exec_path : exe;
    char real[OBS_PATH] = "", resolved[OBS_PATH] = "";
    if (realpath(requested, real)) canonical(real, resolved, sizeof resolved);
    namesakes(requested, alts, sizeof alts);
    event('E', t->tid, 6, requested, resolved, exe, loader, t->exec_via ? "s" : "-", alts);
    const char *theirs = agent_made(exe)        ? exe
                         : agent_made(resolved) ? resolved
                         : agent_made(requested) || t->exec_via ? requested
                         : loader[0] && agent_made(loader) ? loader
                                                           : NULL;
    if (theirs) taint(t, "ran", theirs);
}

/* A connection to a guarded port of this sandbox's loopback. */
static int guarded(Task *t, unsigned long address, unsigned long size, char *shown, size_t cap) {
    struct sockaddr_storage sa = {0};
    if (size > sizeof sa) size = sizeof sa;
    if (size < sizeof(sa_family_t) || peek(t, address, &sa, size) < (ssize_t)size) return 0;
    int port = 0, loopback = 0;
    if (sa.ss_family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&sa;
        port = ntohs(in->sin_port);
        loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127 || in->sin_addr.s_addr == 0;
        inet_ntop(AF_INET, &in->sin_addr, shown, (socklen_t)cap);
    } else if (sa.ss_family == AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&sa;
        port = ntohs(in6->sin6_port);
        const unsigned char *b = in6->sin6_addr.s6_addr;
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) || IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr) ||
                   (!memcmp(b, mapped, 12) && (b[12] == 127 || !(b[12] | b[13] | b[14] | b[15])));
        inet_ntop(AF_INET6, &in6->sin6_addr, shown, (socklen_t)cap);
    }
    if (!loopback) return 0;
    for (int i = 0; i < obs.nguards; i++)
        if (obs.guards[i] == port) {
            size_t n = strlen(shown);
            snprintf(shown + n, cap - n, ":%d", port);
            return 1;
        }
    return 0;
}

static void on_connect(Task *t, SyscallInfo *info) {
    if (!t->proc->tainted) return;
    long nr = (long)info->seccomp.nr;
    unsigned long address = info->seccomp.args[1], size = info->seccomp.args[2];
    if (nr == SYS_sendto) {
        address = info->seccomp.args[4];
        size = info->seccomp.args[5];
    } else if (nr == SYS_sendmsg) {
        struct msghdr msg;
        if (peek(t, info->seccomp.args[1], &msg, sizeof msg) < (ssize_t)sizeof msg) return;
        address = (unsigned long)msg.msg_name;
        size = msg.msg_namelen;
    }
    char shown[INET6_ADDRSTRLEN + 8] = "";
    if (!address || !guarded(t, address, size, shown, sizeof shown)) return;
    event('N', t->proc->pid, 1, shown);
    deny_now(t, EACCES);
}

/* rename, link, symlink, mknod, truncate: a name the agent's code makes is the agent's. */
static void on_naming(Task *t, SyscallInfo *info) {
    long nr = (long)info->seccomp.nr;
    unsigned long from = 0, to;
    long from_dir = AT_FDCWD, to_dir = AT_FDCWD;
    const unsigned long long *a = info->seccomp.args;
    if (nr == SYS_renameat || nr == SYS_renameat2 || nr == SYS_linkat) {
        from_dir = (long)a[0], from = a[1], to_dir = (long)a[2], to = a[3];
    } else if (nr == SYS_symlinkat) {
        to_dir = (long)a[1], to = a[2];
    } else if (nr == SYS_mknodat) {
        to_dir = (long)a[0], to = a[1];
#ifdef SYS_open
    } else if (nr == SYS_rename || nr == SYS_link) {
        from = a[0], to = a[1];
    } else if (nr == SYS_symlink) {
        to = a[1];
#endif
    } else {
        to = a[0]; /* truncate, mknod */
    }
    char target[OBS_PATH], source[OBS_PATH] = "";
    if (requested_path(t, to, to_dir, target, sizeof target) != 0) return;
    if (from) requested_path(t, from, from_dir, source, sizeof source);
    pid_t pid = t->proc->pid;
    if (t->proc->tainted || (source[0] && agent_made(source))) {
        if (!agent_made(target)) event('W', pid, 1, target);
        remember_written(target);
    } else if (source[0] && agent_made(target) && nr != SYS_linkat
#ifdef SYS_link
               && nr != SYS_link
#endif
    ) {
        event('J', pid, 1, target); /* the judge's own file moved over the agent's */
        set_add(&obs.rewritten, target);
    }
}

static int is_open(long nr) {
#ifdef SYS_open
    if (nr == SYS_open || nr == SYS_creat) return 1;
#endif
#ifdef SYS_openat2
    if (nr == SYS_openat2) return 1;
#endif
    return nr == SYS_openat;
}

/* A seccomp stop: what the syscall is, and whether its exit is wanted. */
static int on_seccomp(Task *t) {
    SyscallInfo info;
    if (ptrace(OBS_GET_SYSCALL_INFO, t->tid, sizeof info, &info) <= 0 || info.op != OBS_INFO_SECCOMP)
        return 0;
    long nr = (long)info.seccomp.nr;
    t->nr = nr;
    t->deny = 0;
    if (is_open(nr)) {
        on_open_entry(t, &info);
        return 1;
    }
    if (nr == SYS_execve || nr == SYS_execveat) on_exec_entry(t, &info);
    else if (nr == SYS_mmap) on_mmap(t, &info);
    else if (nr == SYS_connect || nr == SYS_sendto || nr == SYS_sendmsg) on_connect(t, &info);
    else on_naming(t, &info);
    return t->deny != 0;
}

static void on_syscall_exit(Task *t) {
    SyscallInfo info;
    t->in_syscall = 0;
    if (t->deny) {
        set_result(t, -(long)t->deny);
        t->deny = 0;
        return;
    }
    if (ptrace(OBS_GET_SYSCALL_INFO, t->tid, sizeof info, &info) <= 0 || info.op != OBS_INFO_EXIT)
        return;
    if (is_open(t->nr)) on_open_exit(t, info.exit.is_error ? -1 : (long)info.exit.rval);
}

/* -- the loop --------------------------------------------------------------------------- */

static void on_obs_alarm(int sig) {
    (void)sig;
    obs_alarm = 1;
}

static void resume(Task *t, int how, int sig) {
    ptrace(how, t->tid, 0, (void *)(long)sig);
}

static void kill_all(int sig) {
    for (size_t i = 0; i < OBS_TASKS; i++)
        if (obs.tasks[i].tid) kill(obs.tasks[i].tid, sig);
}

/* What each task was doing when the time ran out: a watched syscall still in progress
 * (an open blocked in the kernel), or the syscall it is blocked in with the file of its
 * first argument (a read of a FIFO, say). */
static void in_progress(void) {
    for (size_t i = 0; i < OBS_TASKS; i++) {
        Task *t = &obs.tasks[i];
        if (!t->tid || !t->proc) continue;
        char nr[24], line[256], path[96], raw[OBS_PATH] = "", file[OBS_PATH] = "-";
        if (t->in_syscall) {
            snprintf(nr, sizeof nr, "%ld", t->nr);
            event('B', t->proc->pid, 2, nr, t->requested ? t->requested : "-");
            continue;
        }
        snprintf(path, sizeof path, "/proc/%d/syscall", (int)t->tid);
        int f = open(path, O_RDONLY | O_CLOEXEC);
        if (f < 0) continue;
        ssize_t n = read(f, line, sizeof line - 1);
        close(f);
        if (n <= 0) continue;
        line[n] = '\0';
        long number = -1;
        unsigned long first = 0;
        if (sscanf(line, "%ld %lx", &number, &first) < 1 || number < 0) continue;
        char what[32];
        snprintf(what, sizeof what, "fd/%lu", first);
        if (link_of(t->tid, what, raw, sizeof raw) == 0) canonical(raw, file, sizeof file);
        snprintf(nr, sizeof nr, "%ld", number);
        event('B', t->proc->pid, 2, nr, file);
    }
}

static void adopt(Task *t, pid_t creator) {
    Task *parent = task(creator, 0);
    pid_t tgid = tgid_of(t->tid);
    if (parent && parent->proc && tgid == parent->proc->pid) {
        t->proc = parent->proc; /* a thread */
        t->proc->refs++;
    } else {
        t->proc = obs_alloc(sizeof(Proc));
        t->proc->refs = 1;
        t->proc->pid = tgid;
        if (parent && parent->proc) {
            Proc *from = parent->proc;
            t->proc->tainted = from->tainted;
            t->proc->shell = from->shell;
            t->proc->tests_seen = from->tests_seen;
            t->proc->marks = from->marks;
            t->proc->started = from->started;
            for (int i = 0; i < from->nroots; i++) t->proc->roots[i] = obs_strdup(from->roots[i]);
            t->proc->nroots = from->nroots;
        }
        char who[24];
        snprintf(who, sizeof who, "%d", parent && parent->proc ? (int)parent->proc->pid : 0);
        event('F', tgid, 1, who);
    }
    t->ready = 1;
}

/* The verifier's time is up: what waited is noted, then TERM, and KILL after a while. */
static void on_deadline(int *terminating, double kill_after) {
    if (*terminating) {
        kill_all(SIGKILL);
        return;
    }
    *terminating = 1;
    event('D', obs.root, 0);
    in_progress();
    kill_all(SIGTERM);
    if (kill_after > 0) arm(kill_after);
    else kill_all(SIGKILL);
}

/* A new process or thread: its creator's state, and it goes on once both sides met. */
static void on_new_task(pid_t creator) {
    unsigned long child = 0;
    ptrace(PTRACE_GETEVENTMSG, creator, 0, &child);
    Task *c = task((pid_t)child, 1);
    if (!c || c->ready) return;
    c->fresh = !c->stopped;
    adopt(c, creator);
    if (c->stopped) {
        c->stopped = 0;
        resume(c, PTRACE_CONT, 0);
    }
}

/* A program ran (a thread that ran it takes the process's id: its state moves). */
static Task *on_exec_stop(Task *t) {
    unsigned long former = 0;
    ptrace(PTRACE_GETEVENTMSG, t->tid, 0, &former);
    Task *old = task((pid_t)former, 0);
    pid_t tid = t->tid;
    if (old && old != t) {
        free(t->exec_path);
        t->exec_path = old->exec_path;
        old->exec_path = NULL;
        t->exec_via = old->exec_via;
        task_forget(old);
        t = task(tid, 0);
    }
    if (t) on_exec_event(t);
    return t;
}

/* One stop of a traced task, handled, and the task resumed. */
static void on_stop(Task *t, int status) {
    int sig = WSTOPSIG(status), ev = status >> 16;
    if (!t->ready) { /* a new task before its creator's event: held */
        t->stopped = 1;
        t->fresh = 0;
        return;
    }
    if (t->fresh && sig == SIGSTOP && !ev) { /* a new task's first stop */
        t->fresh = 0;
        resume(t, PTRACE_CONT, 0);
        return;
    }
    if (sig == SIGTRAP && ev == PTRACE_EVENT_SECCOMP) {
        t->in_syscall = on_seccomp(t);
        resume(t, t->in_syscall ? PTRACE_SYSCALL : PTRACE_CONT, 0);
        return;
    }
    if (sig == SIGTRAP && ev) {
        pid_t tid = t->tid;
        if (ev == PTRACE_EVENT_FORK || ev == PTRACE_EVENT_VFORK || ev == PTRACE_EVENT_CLONE) {
            on_new_task(tid);
            t = task(tid, 0);
        } else if (ev == PTRACE_EVENT_EXEC) {
            t = on_exec_stop(t);
        }
        if (t) resume(t, PTRACE_CONT, 0);
        return;
    }
    if (sig == (SIGTRAP | 0x80)) { /* a syscall's exit */
        on_syscall_exit(t);
        resume(t, PTRACE_CONT, 0);
        return;
    }
    siginfo_t si;
    if (ptrace(PTRACE_GETSIGINFO, t->tid, 0, &si) < 0) {
        resume(t, PTRACE_CONT, 0); /* a group stop: keep it running */
        return;
    }
    resume(t, PTRACE_CONT, sig); /* the signal, delivered */
}

/* Until every traced task has ended. */
static void trace_loop(double kill_after) {
    int terminating = 0;
    for (;;) {
        if (obs_alarm) {
            obs_alarm = 0;
            on_deadline(&terminating, kill_after);
        }
        int status;
        pid_t tid = waitpid(-1, &status, __WALL);
        if (tid < 0) {
            if (errno == EINTR) continue;
            if (errno != ECHILD) fail("waitpid");
            return;
        }
        Task *t = task(tid, 1);
        if (!t) { /* more tasks than the table holds: the pids limit keeps it far off */
            kill(tid, SIGKILL);
        } else if (WIFEXITED(status) || WIFSIGNALED(status)) {
            if (tid == obs.root) {
                obs.root_status = status;
                obs.root_done = 1;
                kill_all(SIGKILL); /* what the script left running ends with it */
            }
            task_forget(t);
        } else if (WIFSTOPPED(status) && obs.root_done) {
            kill(tid, SIGKILL); /* a process the script left, seen late: it ends too */
        } else if (WIFSTOPPED(status)) {
            on_stop(t, status);
        }
    }
}

/* -- settings and the start -------------------------------------------------------------- */

static void setting(char *line) {
    char *value = strchr(line, ' ');
    if (!value) return;
    *value++ = '\0';
    unquote(value);
    if (!strcmp(line, "changed")) {
        char canon[OBS_PATH];
        canonical(value, canon, sizeof canon);
        List *l = ends_with(canon, "/") ? &obs.folders : &obs.changed;
        if (l->size == l->cap) {
            l->cap = l->cap ? l->cap * 2 : 1024;
            l->items = realloc(l->items, l->cap * sizeof(char *));
            if (!l->items) _exit(4);
        }
        l->items[l->size++] = obs_strdup(canon);
    } else if (!strcmp(line, "guard") && obs.nguards < OBS_GUARDS) {
        obs.guards[obs.nguards++] = atoi(value);
    } else if (!strcmp(line, "mark") && obs.nmarks < OBS_MARKS && value[0]) {
        obs.marks[obs.nmarks++] = obs_strdup(value);
    } else {
        char **slot = !strcmp(line, "tests") ? &obs.tests
                      : !strcmp(line, "home") ? &obs.home
                      : !strcmp(line, "out")  ? &obs.out
                      : !strcmp(line, "nonce") ? &obs.nonce
                      : !strcmp(line, "path") ? &obs.path
                      : !strcmp(line, "markers") ? &obs.markers
                                              : NULL;
        if (slot) {
            free(*slot);
            *slot = obs_strdup(value);
        }
    }
}

static int read_settings(void) {
    size_t cap = 1 << 20, len = 0;
    char *all = obs_alloc(cap);
    for (;;) {
        if (len + 1 >= cap) {
            if (cap >= (512u << 20)) return -1;
            cap *= 2;
            all = realloc(all, cap);
            if (!all) return -1;
        }
        ssize_t n = read(0, all + len, cap - len - 1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        if (n == 0) break;
        len += (size_t)n;
    }
    all[len] = '\0';
    char *save = NULL;
    for (char *line = strtok_r(all, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        setting(line);
    free(all);
    qsort(obs.changed.items, obs.changed.size, sizeof(char *), by_text);
    qsort(obs.folders.items, obs.folders.size, sizeof(char *), by_text);
    return obs.out && obs.nonce && obs.tests ? 0 : -1;
}

/* A bare program name looked up on the image's PATH, skipping every entry the agent made
 * or reached through a link of its own: the image's program, never one put in its place. */
static int program_path(const char *name, char *out, size_t size) {
    if (strchr(name, '/')) {
        snprintf(out, size, "%s", name);
        return 0;
    }
    char dirs[OBS_PATH];
    snprintf(dirs, sizeof dirs, "%s", obs.path ? obs.path : "/usr/bin:/bin");
    char *save = NULL;
    for (char *dir = strtok_r(dirs, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        char candidate[OBS_PATH], real[OBS_PATH], canon[OBS_PATH];
        snprintf(candidate, sizeof candidate, "%s/%s", dir, name);
        struct stat st;
        if (stat(candidate, &st) != 0 || !S_ISREG(st.st_mode) || access(candidate, X_OK) != 0)
            continue;
        canonical(candidate, canon, sizeof canon);
        if (agent_made(canon) || through_agent_link(canon)) continue;
        if (!realpath(candidate, real)) continue;
        canonical(real, canon, sizeof canon);
        if (agent_made(canon)) continue;
        snprintf(out, size, "%s", candidate);
        return 0;
    }
    return -1;
}

static int write_record(void) {
    char summary[256];
    int n = snprintf(summary, sizeof summary, "Z %d events=%lu dropped=%lu changed=%zu\n",
                     (int)obs.root, obs.events, obs.dropped, obs.changed.size);
    obs.dropped = 0;
    put(summary, (size_t)n);
    char path[OBS_PATH];
    snprintf(path, sizeof path, "%s/observed-%s", obs.out, obs.nonce);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return fail(path);
    size_t done = 0;
    while (done < obs.len) {
        ssize_t w = write(fd, obs.record + done, obs.len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            close(fd);
            return fail("write the record");
        }
        done += (size_t)w;
    }
    return close(fd) == 0 ? 0 : fail("close the record");
}

static int observe(int argc, char **argv) {
    double kill_after = 5;
    int i = 0;
    if (i + 1 < argc && !strcmp(argv[i], "-k")) {
        kill_after = duration(argv[i + 1]);
        i += 2;
    }
    if (argc - i < 2 || kill_after < 0) {
        dprintf(2, "usage: hangar-helper observe [-k DURATION] DURATION PROGRAM ARGS...\n");
        return 2;
    }
    double limit = duration(argv[i]);
    if (limit < 0 || read_settings() != 0) {
        dprintf(2, "hangar-helper observe: bad duration or settings\n");
        return 2;
    }
    /* No process of the same user may read this one's memory or descriptors. */
    prctl(PR_SET_DUMPABLE, 0);
    char program[OBS_PATH];
    if (program_path(argv[i + 1], program, sizeof program) != 0) {
        dprintf(2, "hangar-helper observe: no %s of the image's own on PATH (the agent changed "
                   "every one)\n", argv[i + 1]);
        event('X', 0, 1, "no-program");
        write_record();
        return 5;
    }
    obs.self = getpid();
    obs.self_group = getpgrp();
    int hold[2];
    if (pipe(hold) != 0) return fail("pipe");
    Filter filter = {0};
    build_filter(&filter, obs.self, obs.self_group, getppid());
    if (filter.overflow) {
        dprintf(2, "hangar-helper observe: the filter is too long\n");
        return 4;
    }
    pid_t child = fork();
    if (child < 0) return fail("fork");
    if (child == 0) {
        setsid();
        prctl(PR_SET_DUMPABLE, 1); /* the script's processes are readable to this one */
        int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            (void)!write(fd, "1000", 4); /* the tests die before their watcher */
            close(fd);
        }
        close(hold[1]);
        dup2(hold[0], 0); /* stdin: empty */
        close(hold[0]);
        if (ptrace(PTRACE_TRACEME, 0, 0, 0) != 0) _exit(126);
        raise(SIGSTOP);
        struct sock_fprog prog = {filter.n, filter.code};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
            syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
            _exit(126);
        argv[i + 1] = program;
        execv(program, argv + i + 1);
        _exit(errno == ENOENT ? 127 : 126);
    }
    close(hold[0]);
    close(hold[1]);
    obs.root = child;
    int status;
    if (waitpid(child, &status, __WALL) != child || !WIFSTOPPED(status)) return fail("start");
    long options = PTRACE_O_TRACESYSGOOD | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK |
                   PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXEC | PTRACE_O_TRACESECCOMP |
                   PTRACE_O_EXITKILL;
    if (ptrace(PTRACE_SETOPTIONS, child, 0, (void *)options) != 0) return fail("ptrace");
    Task *root = task(child, 1);
    root->proc = obs_alloc(sizeof(Proc));
    root->proc->refs = 1;
    root->proc->pid = child;
    root->proc->shell = 1;
    root->ready = 1;
    event('S', child, 0);
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    struct sigaction alarm_action = {.sa_handler = on_obs_alarm};
    sigaction(SIGALRM, &alarm_action, NULL);
    arm(limit);
    resume(root, PTRACE_CONT, 0);
    trace_loop(kill_after);
    char shown[32];
    if (obs.root_done && WIFEXITED(obs.root_status))
        snprintf(shown, sizeof shown, "%d", WEXITSTATUS(obs.root_status));
    else if (obs.root_done)
        snprintf(shown, sizeof shown, "signal-%d", WTERMSIG(obs.root_status));
    else
        snprintf(shown, sizeof shown, "unknown");
    event('X', obs.root, 1, shown);
    return write_record() == 0 ? 0 : 4;
}
