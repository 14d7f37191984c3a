/*
 * scrlib-app: the project's own MPI test application for the real SCR
 * library (test/scrlib). Each rank writes, per checkpoint, one file of
 * verifiable content through SCR; SCR_FLUSH_ASYNC=1 in the environment makes
 * the library hand every checkpoint to the transfer daemon.
 *
 *   scrlib-app write N BYTES [PAUSE_MS]   N checkpoints of BYTES per rank,
 *                                         PAUSE_MS of "computation" after each
 *   scrlib-app restart                    restart from the newest checkpoint
 *                                         SCR finds (cache or file system)
 *                                         and check every byte
 *
 * Checkpoint c of rank r is the file "c<c>.rank_<r>.ckpt" (relative to the
 * working directory, which must be SCR_PREFIX): a 16-byte header ("SCRT", rank,
 * checkpoint number, 4 bytes zero; integers big-endian 32-bit) and then the
 * bytes of xorshift64 seeded with (rank, checkpoint), the top byte of each
 * state. The Go tests compute the same bytes (content in scrlib_test.go).
 *
 * Exit status 0 on success; 1 with a message on standard error naming the
 * rank, the file and the problem otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>
#include <scr.h>

enum { HEADER = 16 };

static int rank;

static void die(const char *what, const char *file)
{
    fprintf(stderr, "scrlib-app: rank %d: %s: %s\n", rank, file ? file : "-", what);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static uint64_t seed(int r, int ckpt)
{
    uint64_t x = 0x9E3779B97F4A7C15ull ^ ((uint64_t)(r + 1) << 32) ^ (uint64_t)(ckpt + 1);
    return x ? x : 1;
}

static uint64_t next(uint64_t x)
{
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = v >> 24;
    p[1] = v >> 16;
    p[2] = v >> 8;
    p[3] = v;
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* fill writes the content of checkpoint ckpt of rank r, size bytes. */
static void fill(unsigned char *buf, size_t size, int r, int ckpt)
{
    memset(buf, 0, HEADER);
    memcpy(buf, "SCRT", 4);
    put32(buf + 4, (uint32_t)r);
    put32(buf + 8, (uint32_t)ckpt);
    uint64_t x = seed(r, ckpt);
    for (size_t i = HEADER; i < size; i++) {
        x = next(x);
        buf[i] = (unsigned char)(x >> 56);
    }
}

static void write_all(int fd, const unsigned char *buf, size_t n, const char *file)
{
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die(strerror(errno), file);
        buf += w;
        n -= (size_t)w;
    }
}

static int checkpoints(int n, size_t size, int pause_ms)
{
    unsigned char *buf = malloc(size);
    if (buf == NULL)
        die("out of memory", NULL);
    for (int c = 1; c <= n; c++) {
        char name[64], path[SCR_MAX_FILENAME];
        snprintf(name, sizeof name, "c%d.rank_%d.ckpt", c, rank);
        if (SCR_Start_checkpoint() != SCR_SUCCESS)
            die("SCR_Start_checkpoint failed", name);
        if (SCR_Route_file(name, path) != SCR_SUCCESS)
            die("SCR_Route_file failed", name);
        fill(buf, size, rank, c);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0)
            die(strerror(errno), path);
        write_all(fd, buf, size, path);
        int valid = fsync(fd) == 0 && close(fd) == 0;
        if (SCR_Complete_checkpoint(valid) != SCR_SUCCESS)
            die("SCR_Complete_checkpoint failed", path);
        if (rank == 0)
            printf("checkpoint %d complete\n", c);
        fflush(stdout);
        if (pause_ms > 0)
            usleep((useconds_t)pause_ms * 1000);
    }
    free(buf);
    return 0;
}

static int restart(void)
{
    int have = 0;
    char dset[SCR_MAX_FILENAME] = "";
    if (SCR_Have_restart(&have, dset) != SCR_SUCCESS || !have)
        die("SCR found no checkpoint to restart from", NULL);
    if (SCR_Start_restart(dset) != SCR_SUCCESS)
        die("SCR_Start_restart failed", dset);
    /* The restarted checkpoint's number is not known: its file is the one
     * of this rank that SCR has in the cache. */
    char name[64], path[SCR_MAX_FILENAME];
    int fd = -1;
    for (int c = 1; c <= 1000 && fd < 0; c++) {
        snprintf(name, sizeof name, "c%d.rank_%d.ckpt", c, rank);
        if (SCR_Route_file(name, path) == SCR_SUCCESS)
            fd = open(path, O_RDONLY);
    }
    if (fd < 0)
        die("no checkpoint file of this rank in the restarted dataset", dset);
    off_t size = lseek(fd, 0, SEEK_END);
    if (size < HEADER)
        die("shorter than its header", path);
    unsigned char *got = malloc((size_t)size), *want = malloc((size_t)size);
    if (got == NULL || want == NULL)
        die("out of memory", path);
    if (pread(fd, got, (size_t)size, 0) != size)
        die("short read", path);
    close(fd);
    if (memcmp(got, "SCRT", 4) != 0 || get32(got + 4) != (uint32_t)rank)
        die("not this rank's checkpoint file", path);
    int ckpt = (int)get32(got + 8);
    fill(want, (size_t)size, rank, ckpt);
    int valid = memcmp(got, want, (size_t)size) == 0;
    if (!valid)
        die("content differs from what was written", path);
    if (SCR_Complete_restart(valid) != SCR_SUCCESS)
        die("SCR_Complete_restart failed", path);
    int lo = ckpt, hi = ckpt;
    MPI_Allreduce(&ckpt, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&ckpt, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (lo != hi)
        die("ranks restarted from different checkpoints", path);
    if (rank == 0)
        printf("restarted from %s: checkpoint %d, %lld bytes a rank, every byte right\n", dset, ckpt, (long long)size);
    free(got);
    free(want);
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 2)
        die("usage: scrlib-app write N BYTES [PAUSE_MS] | restart", NULL);
    if (SCR_Init() != SCR_SUCCESS)
        die("SCR_Init failed", NULL);
    int rc;
    if (strcmp(argv[1], "write") == 0 && argc >= 4) {
        long long size = atoll(argv[3]);
        if (size < HEADER)
            die("BYTES must be at least 16", NULL);
        rc = checkpoints(atoi(argv[2]), (size_t)size, argc > 4 ? atoi(argv[4]) : 0);
    } else if (strcmp(argv[1], "restart") == 0) {
        rc = restart();
    } else {
        die("usage: scrlib-app write N BYTES [PAUSE_MS] | restart", NULL);
        rc = 1;
    }
    if (SCR_Finalize() != SCR_SUCCESS)
        die("SCR_Finalize failed", NULL);
    if (rank == 0)
        printf("finalized\n");
    MPI_Finalize();
    return rc;
}
