/* tlsca: a throwaway CA for the TLS tests; see tlsca.h. */
#include "tlsca.h"
#include "mem.h"
#include "proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct tlsca {
    char *dir;
    char *ca;
    char *wrong_ca;
    char *cert;
    char *key;
    char *other_cert;
    char *other_key;
    char *rsa_cert;
    char *rsa_key;
};

tlsca_t *tlsca_new(void) {
    const char *src = getenv("CHATFLEET_SOURCE_DIR");
    ASSERT(src); /* ctest sets it; a manual run must too */
    char tmpl[] = "/tmp/cftls.XXXXXX";
    ASSERT(mkdtemp(tmpl));
    char bin[600];
    snprintf(bin, sizeof bin, "%s/tests/support/tls-certs", src);
    char *argv[] = {bin, tmpl, NULL};
    char *out = proc_output(argv, NULL);
    if (!out) {
        fprintf(stderr, "tlsca: %s %s failed (is openssl installed?)\n", bin, tmpl);
        abort();
    }
    free(out);
    tlsca_t *self = mem_calloc(1, sizeof *self);
    self->dir = mem_strdup(tmpl);
    self->ca = mem_printf("%s/ca.pem", tmpl);
    self->wrong_ca = mem_printf("%s/wrong-ca.pem", tmpl);
    self->cert = mem_printf("%s/server.pem", tmpl);
    self->key = mem_printf("%s/server.key", tmpl);
    self->other_cert = mem_printf("%s/otherhost.pem", tmpl);
    self->other_key = mem_printf("%s/otherhost.key", tmpl);
    self->rsa_cert = mem_printf("%s/server-rsa.pem", tmpl);
    self->rsa_key = mem_printf("%s/server-rsa.key", tmpl);
    ASSERT(access(self->ca, R_OK) == 0 && access(self->key, R_OK) == 0 &&
           access(self->other_key, R_OK) == 0 && access(self->wrong_ca, R_OK) == 0 &&
           access(self->rsa_key, R_OK) == 0);
    return self;
}

void tlsca_destroy(tlsca_t **self_p) {
    tlsca_t *self = *self_p;
    if (!self) {
        return;
    }
    char *argv[] = {"/bin/rm", "-rf", self->dir, NULL};
    free(proc_output(argv, NULL)); /* best effort: a temporary directory */
    free(self->dir);
    free(self->ca);
    free(self->wrong_ca);
    free(self->cert);
    free(self->key);
    free(self->other_cert);
    free(self->other_key);
    free(self->rsa_cert);
    free(self->rsa_key);
    free(self);
    *self_p = NULL;
}

const char *tlsca_ca(const tlsca_t *self) {
    return self->ca;
}

const char *tlsca_wrong_ca(const tlsca_t *self) {
    return self->wrong_ca;
}

const char *tlsca_cert(const tlsca_t *self) {
    return self->cert;
}

const char *tlsca_key(const tlsca_t *self) {
    return self->key;
}

const char *tlsca_other_cert(const tlsca_t *self) {
    return self->other_cert;
}

const char *tlsca_other_key(const tlsca_t *self) {
    return self->other_key;
}

const char *tlsca_rsa_cert(const tlsca_t *self) {
    return self->rsa_cert;
}

const char *tlsca_rsa_key(const tlsca_t *self) {
    return self->rsa_key;
}
