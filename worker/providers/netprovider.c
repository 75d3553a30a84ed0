/* netprovider: see netprovider.h; the wire formats are in worker/providers/README.md. */
#include "netprovider.h"

#include <stdlib.h>

/* The header lines of a call in the order every provider has always sent them: Accept, the
 * fixed line, the credential. A NULL key ends the list early, as no key means no header. */
static void s_headers(const netprovider_spec_t *spec, bool summary, const char *key,
                      const char *headers[4]) {
    size_t n = 0;
    headers[n++] = summary ? spec->accept_whole : spec->accept_stream;
    if (spec->fixed_header) {
        headers[n++] = spec->fixed_header;
    }
    headers[n++] = key;
    headers[n] = NULL;
}

void netprovider_start(const netprovider_spec_t *spec, provider_call_t *call,
                       const provider_request_t *req) {
    char *key = NULL;
    if (httpstream_key_header(spec->name, req->model, spec->key_name, spec->key_prefix, &key,
                              &call->out) != 0) {
        provider_call_end(call, PROVIDER_ERROR);
        return;
    }
    json_t *body = spec->body(req);
    char *url = httpstream_url(req->model->base_url, spec->base_url_default, spec->path);
    const char *headers[4];
    s_headers(spec, req->summary, key, headers);
    void *state = spec->state_new(call);
    httpstream_request_t hr = {.url = url,
                               .headers = headers,
                               .mode = req->summary ? HTTPSTREAM_WHOLE : spec->stream_mode,
                               .on_event = req->summary ? spec->on_whole : spec->on_event,
                               .ctx = state};
    httpstream_exchange(call, spec->name, hr, body, spec->ok, state, spec->state_free);
    json_decref(body);
    free(url);
    free(key);
}
