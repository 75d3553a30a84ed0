/*
 * tlsca: a throwaway certificate authority for the TLS tests, made by tests/support/tls-certs
 * (the openssl command) in a temporary directory: a CA, a server certificate and key for
 * localhost and 127.0.0.1, one for another host name (otherhost.invalid), and a second CA
 * that signed nothing here (a wrong trust anchor). Keys are 0600.
 */
#ifndef CHATFLEET_TLSCA_H
#define CHATFLEET_TLSCA_H

typedef struct tlsca tlsca_t;

/* Makes the files; aborts the test when openssl fails. */
tlsca_t *tlsca_new(void);
/* Removes the directory. */
void tlsca_destroy(tlsca_t **self_p);

const char *tlsca_ca(const tlsca_t *self);         /* the CA that signed the server certs */
const char *tlsca_wrong_ca(const tlsca_t *self);   /* a CA that signed none of them */
const char *tlsca_cert(const tlsca_t *self);       /* server cert: localhost, 127.0.0.1 */
const char *tlsca_key(const tlsca_t *self);        /* its key */
const char *tlsca_other_cert(const tlsca_t *self); /* server cert: otherhost.invalid only */
const char *tlsca_other_key(const tlsca_t *self);  /* its key */
const char *tlsca_rsa_cert(const tlsca_t *self);   /* server cert as server's, an RSA key */
const char *tlsca_rsa_key(const tlsca_t *self);    /* its key (encipherment allowed) */

#endif
