/* hangar-helper tar DIR: DIR's contents as a tar stream on stdout, for a folder copied out
 * of a sandbox where no bind mount reaches (Kubernetes), without running anything of the
 * image (its sh, tar or base64, which an agent may have replaced).
 *
 * Included by helper.c. The walk never follows a link: every folder is opened with
 * O_NOFOLLOW relative to its parent's descriptor, every file with O_NOFOLLOW | O_NONBLOCK
 * and kept only if fstat says it is regular (a FIFO is never waited on, a device never
 * read). Links are written as links; FIFOs, sockets and devices are left out and named on
 * stderr. A file is written at the size fstat gave (zeros if it shrank, cut if it grew), so
 * the stream is always well formed. Names are "./REL" as `tar -c -C DIR .` writes them;
 * a name or link longer than the header holds gets a GNU long-name record first. Exit 3:
 * DIR is not a folder; 1: something was left out or could not be read (the stream is
 * still complete).
 */

#define TAR_BLOCK 512
#define TAR_DEPTH 256

static int tar_status;

static void tar_write(const void *data, size_t size) { write_all(1, data, size); }

static void tar_octal(char *field, size_t width, unsigned long long value) {
    snprintf(field, width, "%0*llo", (int)width - 1, value);
}

static void tar_header(const char *name, char type, unsigned mode, unsigned long long size,
                       long long mtime, const char *link);

/* A GNU long-name ('L') or long-link ('K') record: the text, then its blocks. */
static void tar_long(char type, const char *text) {
    size_t size = strlen(text) + 1;
    tar_header("././@LongLink", type, 0644, size, 0, "");
    tar_write(text, size);
    static const char zeros[TAR_BLOCK];
    tar_write(zeros, (TAR_BLOCK - size % TAR_BLOCK) % TAR_BLOCK);
}

static void tar_header(const char *name, char type, unsigned mode, unsigned long long size,
                       long long mtime, const char *link) {
    if (type != 'L' && type != 'K') {
        if (strlen(name) > 99) tar_long('L', name);
        if (strlen(link) > 99) tar_long('K', link);
    }
    char h[TAR_BLOCK];
    memset(h, 0, sizeof h);
    strncpy(h, name, 99);
    tar_octal(h + 100, 8, mode & 07777);
    tar_octal(h + 108, 8, 0);
    tar_octal(h + 116, 8, 0);
    if (size < 077777777777ULL) {
        tar_octal(h + 124, 12, size);
    } else { /* base-256, as GNU tar writes a size past 8 GiB */
        h[124] = (char)0x80;
        for (int i = 11; i > 0; i--, size >>= 8) h[124 + i] = (char)(size & 0xff);
    }
    tar_octal(h + 136, 12, (unsigned long long)(mtime > 0 ? mtime : 0));
    memset(h + 148, ' ', 8);
    h[156] = type;
    strncpy(h + 157, link, 99);
    memcpy(h + 257, "ustar  ", 8); /* GNU's magic and version: long-name records are GNU's */
    unsigned sum = 0;
    for (int i = 0; i < TAR_BLOCK; i++) sum += (unsigned char)h[i];
    snprintf(h + 148, 8, "%06o", sum);
    tar_write(h, sizeof h);
}

static void tar_left_out(const char *name, const char *why) {
    dprintf(2, "hangar-helper tar: %s: %s\n", name, why);
    tar_status = 1;
}

/* The regular file `leaf` of folder `dir`, under its archive `name`. */
static void tar_file(int dir, const char *leaf, const char *name) {
    int fd = openat(dir, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0) close(fd);
        tar_left_out(name, "not a regular file, or unreadable");
        return;
    }
    unsigned long long left = (unsigned long long)st.st_size;
    tar_header(name, '0', st.st_mode, left, st.st_mtime, "");
    char buf[CHUNK];
    while (left > 0) {
        size_t want = left < sizeof buf ? (size_t)left : sizeof buf;
        ssize_t got = read(fd, buf, want);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) { /* it shrank: zeros keep the stream whole */
            memset(buf, 0, want);
            got = (ssize_t)want;
            tar_status = 1;
        }
        tar_write(buf, (size_t)got);
        left -= (unsigned long long)got;
    }
    close(fd);
    static const char zeros[TAR_BLOCK];
    tar_write(zeros, (TAR_BLOCK - (size_t)(st.st_size % TAR_BLOCK)) % TAR_BLOCK);
}

/* Every entry of the folder open at `dir`, whose archive name is `prefix` ("./sub/"). */
static void tar_folder(int dir, const char *prefix, int depth) {
    DIR *listing = fdopendir(dir);
    if (listing == NULL) {
        close(dir);
        tar_left_out(prefix, "cannot list");
        return;
    }
    struct dirent *entry;
    while ((entry = readdir(listing)) != NULL) {
        const char *leaf = entry->d_name;
        if (!strcmp(leaf, ".") || !strcmp(leaf, "..")) continue;
        char name[4096];
        if (snprintf(name, sizeof name, "%s%s", prefix, leaf) >= (int)sizeof name - 1) {
            tar_left_out(leaf, "a path longer than 4096 bytes");
            continue;
        }
        struct stat st;
        if (fstatat(dirfd(listing), leaf, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            tar_left_out(name, "vanished");
        } else if (S_ISREG(st.st_mode)) {
            tar_file(dirfd(listing), leaf, name);
        } else if (S_ISLNK(st.st_mode)) {
            char link[4096];
            ssize_t n = readlinkat(dirfd(listing), leaf, link, sizeof link - 1);
            if (n < 0) {
                tar_left_out(name, "unreadable link");
                continue;
            }
            link[n] = '\0';
            tar_header(name, '2', 0777, 0, st.st_mtime, link);
        } else if (S_ISDIR(st.st_mode)) {
            int inner = openat(dirfd(listing), leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (inner < 0 || depth >= TAR_DEPTH) {
                if (inner >= 0) close(inner);
                tar_left_out(name, depth >= TAR_DEPTH ? "folders nested too deep" : "cannot open");
                continue;
            }
            strcat(name, "/");
            tar_header(name, '5', st.st_mode, 0, st.st_mtime, "");
            tar_folder(inner, name, depth + 1);
        } else {
            tar_left_out(name, "a FIFO, socket or device");
        }
    }
    closedir(listing);
}

static int tar_out(int argc, char **argv) {
    if (argc != 1) {
        dprintf(2, "usage: hangar-helper tar DIR\n");
        return 2;
    }
    int dir = open(argv[0], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0) {
        dprintf(2, "hangar-helper tar: %s is not a folder\n", argv[0]);
        return 3;
    }
    tar_header("./", '5', 0755, 0, 0, "");
    tar_folder(dir, "./", 0);
    static const char end[2 * TAR_BLOCK];
    tar_write(end, sizeof end);
    return tar_status;
}
