/* whsig: Standard Webhooks signatures; see whsig.h. */
#include "whsig.h"

#include "mem.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The key a secret names: its bytes into key (WHSIG_KEY_MAX_BYTES) and their count, or -1. */
static int s_key(const char *secret, unsigned char key[WHSIG_KEY_MAX_BYTES]) {
    size_t plen = strlen(WHSIG_SECRET_PREFIX);
    if (!secret || strncmp(secret, WHSIG_SECRET_PREFIX, plen) != 0) {
        return -1;
    }
    const char *b64 = secret + plen;
    size_t n = strlen(b64);
    if (n == 0 || n % 4 != 0 || n > 4 * ((WHSIG_KEY_MAX_BYTES + 2) / 3)) {
        return -1;
    }
    unsigned char raw[4 * ((WHSIG_KEY_MAX_BYTES + 2) / 3)];
    int len = EVP_DecodeBlock(raw, (const unsigned char *)b64, (int)n);
    if (len < 0) {
        return -1;
    }
    /* EVP_DecodeBlock counts the padding as zero bytes: take them off. */
    len -= (b64[n - 1] == '=') + (b64[n - 2] == '=');
    if (len < WHSIG_KEY_BYTES || len > WHSIG_KEY_MAX_BYTES) {
        return -1;
    }
    memcpy(key, raw, (size_t)len);
    OPENSSL_cleanse(raw, sizeof raw);
    return len;
}

int whsig_secret_new(char out[WHSIG_SECRET_MAX]) {
    unsigned char key[WHSIG_KEY_BYTES];
    out[0] = '\0';
    if (RAND_bytes(key, sizeof key) != 1) {
        return -1;
    }
    size_t plen = strlen(WHSIG_SECRET_PREFIX);
    memcpy(out, WHSIG_SECRET_PREFIX, plen);
    EVP_EncodeBlock((unsigned char *)out + plen, key, sizeof key);
    OPENSSL_cleanse(key, sizeof key);
    return 0;
}

int whsig_sign(const char *secret, const char *id, int64_t timestamp, const char *body,
               size_t body_len, char out[WHSIG_SIGNATURE_MAX]) {
    out[0] = '\0';
    unsigned char key[WHSIG_KEY_MAX_BYTES];
    int klen = s_key(secret, key);
    if (klen < 0 || !id || strchr(id, '.')) {
        return -1;
    }
    char head[256 + 32];
    int hlen = snprintf(head, sizeof head, "%s.%lld.", id, (long long)timestamp);
    if (hlen < 0 || (size_t)hlen >= sizeof head) {
        OPENSSL_cleanse(key, sizeof key);
        return -1;
    }
    /* One buffer for the signed content: HMAC() is the one-shot form OpenSSL 3 keeps. */
    size_t n = (size_t)hlen + (body ? body_len : 0);
    unsigned char *content = mem_alloc(n + 1);
    memcpy(content, head, (size_t)hlen);
    if (body && body_len) {
        memcpy(content + hlen, body, body_len);
    }
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mlen = 0;
    bool ok = HMAC(EVP_sha256(), key, klen, content, n, mac, &mlen) && mlen == 32;
    free(content);
    OPENSSL_cleanse(key, sizeof key);
    if (!ok) {
        return -1;
    }
    memcpy(out, "v1,", 3);
    EVP_EncodeBlock((unsigned char *)out + 3, mac, (int)mlen);
    return 0;
}

bool whsig_verify(const char *secret, const char *id, int64_t timestamp, const char *body,
                  size_t body_len, const char *header) {
    char want[WHSIG_SIGNATURE_MAX];
    if (!header || whsig_sign(secret, id, timestamp, body, body_len, want) != 0) {
        return false;
    }
    size_t wlen = strlen(want);
    bool found = false;
    for (const char *p = header; *p;) {
        p += strspn(p, " ");
        size_t len = strcspn(p, " ");
        if (len == wlen && CRYPTO_memcmp(p, want, wlen) == 0) {
            found = true;
        }
        p += len;
    }
    return found;
}
