/* fdfill: every descriptor of the test process taken; see fdfill.h. */
#include "fdfill.h"
#include "mem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

struct fdfill {
    struct rlimit old;
    int *fds;
    int n;
};

/* Closes the descriptors held and puts the old limit back. Returns 0, or -1 on a failure. */
static int s_release(fdfill_t *self) {
    int rc = 0;
    for (int i = 0; i < self->n; i++) {
        rc |= close(self->fds[i]);
    }
    self->n = 0;
    rc |= setrlimit(RLIMIT_NOFILE, &self->old);
    return rc == 0 ? 0 : -1;
}

fdfill_t *fdfill_new(long limit) {
    fdfill_t *self = mem_calloc(1, sizeof *self);
    if (limit <= 0 || getrlimit(RLIMIT_NOFILE, &self->old) != 0) {
        free(self);
        return NULL;
    }
    struct rlimit low = {.rlim_cur = (rlim_t)limit, .rlim_max = self->old.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &low) != 0) {
        free(self);
        return NULL;
    }
    /* Open descriptors count against the limit, so at most limit new ones can be opened. */
    self->fds = mem_calloc((size_t)limit, sizeof *self->fds);
    int fd = -1;
    while (self->n < limit && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0) {
        self->fds[self->n++] = fd;
    }
    if (fd >= 0 || errno != EMFILE) {
        (void)s_release(self); /* the limit was not reached, or open failed otherwise */
        free(self->fds);
        free(self);
        return NULL;
    }
    return self;
}

int fdfill_destroy(fdfill_t **self_p) {
    fdfill_t *self = *self_p;
    if (!self) {
        return 0;
    }
    int rc = s_release(self);
    free(self->fds);
    free(self);
    *self_p = NULL;
    return rc;
}
