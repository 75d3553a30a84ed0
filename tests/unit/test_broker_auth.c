/* The broker's allow directory (broker/README.md "Security", ARCHITECTURE.md §9 "Rotation"):
 * a removed certificate is revoked even when every descriptor is in use; a certificate that
 * cannot be opened now fails the whole look and drops no key, and the next look (forced if
 * the failed one was) takes it in; a file that is not a certificate is skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <czmq.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "curve.h"
#include "fdfill.h"

static char s_dir[64];
static char s_allow[128];

/* Makes a key pair named name with role under s_dir and puts its public key in pub; moves
 * its public file into the allow directory when admit. */
static void s_key(const char *name, const char *role, bool admit, char *pub, size_t publen) {
    char err[256];
    assert_int_equal(curve_keygen(role, name, s_dir, err, sizeof err), 0);
    char from[256];
    snprintf(from, sizeof from, "%s/%s.cert", s_dir, name);
    curve_key_t k;
    assert_int_equal(curve_key_read(from, false, &k, err, sizeof err), 0);
    assert_true(strlen(k.public_txt) < publen);
    snprintf(pub, publen, "%s", k.public_txt);
    if (admit) {
        char to[256];
        snprintf(to, sizeof to, "%s/%s.cert", s_allow, name);
        assert_int_equal(rename(from, to), 0);
    }
}

static void test_the_allow_directory_holds_without_descriptors(void **u) {
    (void)u;
    char pub_a[64], pub_b[64], pub_c[64], pub_s[64];
    s_key("server", "broker", false, pub_s, sizeof pub_s);
    s_key("a", "worker", true, pub_a, sizeof pub_a);
    s_key("b", "gateway", true, pub_b, sizeof pub_b);
    char junk[256];
    snprintf(junk, sizeof junk, "%s/junk.cert", s_allow);
    FILE *f = fopen(junk, "w");
    assert_non_null(f);
    assert_true(fputs("not a certificate\n", f) >= 0);
    assert_int_equal(fclose(f), 0);

    char server[256];
    char err[512];
    snprintf(server, sizeof server, "%s/server.cert_secret", s_dir);
    auth_t *auth = auth_new(server, s_allow, err, sizeof err);
    assert_non_null(auth);
    assert_int_equal(auth_count(auth), 2); /* the junk file is skipped */
    assert_string_equal(auth_role(auth, pub_a), "worker");
    assert_string_equal(auth_role(auth, pub_b), "gateway");
    assert_int_equal(auth_reload(auth, false, err, sizeof err), 0); /* unchanged */

    /* With every descriptor taken: a removal is still seen. */
    fdfill_t *fill = fdfill_new(256);
    assert_non_null(fill);
    char path[256];
    snprintf(path, sizeof path, "%s/a.cert", s_allow);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(auth_reload(auth, false, err, sizeof err), AUTH_RELOAD_REVOKED);
    assert_null(auth_role(auth, pub_a));
    assert_string_equal(auth_role(auth, pub_b), "gateway");

    /* A new certificate cannot be opened now: the look fails with the reason and keeps the
     * map (b stays admitted); the next look, once descriptors are free, takes it in. */
    assert_int_equal(fdfill_destroy(&fill), 0);
    s_key("c", "worker", true, pub_c, sizeof pub_c);
    fill = fdfill_new(256);
    assert_non_null(fill);
    assert_int_equal(auth_reload(auth, true, err, sizeof err), -1);
    printf("failed look: %s\n", err);
    assert_non_null(strstr(err, "Too many open files"));
    assert_string_equal(auth_role(auth, pub_b), "gateway");
    assert_null(auth_role(auth, pub_c));
    assert_int_equal(auth_reload(auth, false, err, sizeof err), -1); /* still none */
    assert_int_equal(fdfill_destroy(&fill), 0);
    assert_int_equal(auth_reload(auth, false, err, sizeof err), 1); /* the retry: c is in */
    assert_string_equal(auth_role(auth, pub_c), "worker");
    assert_string_equal(auth_role(auth, pub_b), "gateway");
    assert_int_equal(auth_count(auth), 2);
    auth_destroy(&auth);
    assert_null(auth);
}

int main(void) {
    snprintf(s_dir, sizeof s_dir, "/tmp/cfauth.XXXXXX");
    assert_non_null(mkdtemp(s_dir));
    snprintf(s_allow, sizeof s_allow, "%s/allow", s_dir);
    assert_int_equal(mkdir(s_allow, 0700), 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_allow_directory_holds_without_descriptors),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not remove %s\n", s_dir);
    }
    return rc;
}
