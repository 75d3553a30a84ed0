/*
 * Chats people can find (issue 38, "Must show" 1; api-shapes.md §2, §3.1), end to end over real
 * processes: PostgreSQL, a broker, one gateway and one worker on the sim model. Proves that a
 * search finds a chat by a word only its third message holds, and never another user's chat;
 * that q's archived: tokens, labels, after_id and offset combine with it; that labels filter
 * with AND, replace all, clear with {} and are capped at 50; that pins append, reorder with
 * clamping, close their gap on unpin and archive, refuse archived chats and negatives, and that
 * concurrent pins never share a place; that offset pages without overlap or gap; that every GET
 * route of the real route table refuses an unknown query parameter with a 400 naming it (and
 * does not refuse the ones it names); and that has_unread turns on when the assistant answers
 * and off when the owner reads the messages or the stream.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "dynbuf.h"
#include "mem.h"
#include "proc.h"
#include "routes.h"
#include "sse.h"

#define WAIT_MS     30000
#define WORD        "quokkazyx" /* a word no title, filler or other test message holds */
#define UNKNOWN_Q   "zz_not_a_param"
#define NOT_A_PARAM "is not a query parameter of this route" /* http_query_known's details */
#define TWICE       "is given more than once"
#define WELL_FORMED "00000000-0000-4000-8000-00000000beef" /* an id nobody has */
#define PINNERS     8                                      /* concurrent pin requests */

static cluster_t *s_c;
static char *s_bob;    /* a second user: the search must never show his chats */
static char *s_pinner; /* a user of the pin tests alone */
static char *s_pager;  /* a user of the offset test alone */

/* ---- HTTP ---- */

typedef struct {
    long status;
    char *body;
    json_t *json; /* the body parsed, or NULL */
} resp_t;

static size_t s_collect(char *data, size_t size, size_t n, void *ud) {
    return dynbuf_add(ud, data, size * n) == 0 ? size * n : 0;
}

/* One request; a streaming answer is cut after timeout_ms (its status is kept). */
static resp_t s_http_t(const char *method, const char *path, const char *token, const char *body,
                       long timeout_ms) {
    CURL *c = curl_easy_init();
    ASSERT(c);
    char *url = mem_printf("%s%s", cluster_url(s_c, 0), path);
    char *auth = mem_printf("Authorization: Bearer %s", token);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    h = curl_slist_append(h, auth);
    dynbuf_t b;
    dynbuf_init(&b, 8 * 1024 * 1024);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    }
    CURLcode rc = curl_easy_perform(c);
    resp_t r = {0};
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    if (rc != CURLE_OK && !(rc == CURLE_OPERATION_TIMEDOUT && r.status == 200)) {
        fail_msg("%s %s: %s", method, path, curl_easy_strerror(rc));
    }
    r.body = mem_strdup(dynbuf_str(&b));
    r.json = json_loads(r.body, 0, NULL);
    dynbuf_free(&b);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    free(auth);
    free(url);
    return r;
}

static resp_t s_http(const char *method, const char *path, const char *token, const char *body) {
    return s_http_t(method, path, token, body, WAIT_MS);
}

static void s_free(resp_t *r) {
    free(r->body);
    json_decref(r->json);
}

/* The first validation's field of an error body, or "". */
static const char *s_field(const resp_t *r) {
    const char *f = json_string_value(
        json_object_get(json_array_get(json_object_get(r->json, "validations"), 0), "field"));
    return f ? f : "";
}

/* Sends and asserts want; a 400 must name field (and carry message when given). Frees. */
static void s_expect(const char *method, const char *path, const char *token, const char *body,
                     long want, const char *field, const char *message) {
    resp_t r = s_http(method, path, token, body);
    const char *got = json_string_value(json_object_get(r.json, "message"));
    if (r.status != want || (field && strcmp(s_field(&r), field) != 0) ||
        (message && (!got || strcmp(got, message) != 0))) {
        fail_msg("%s %s %s: want %ld %s %s, got %ld %s", method, path, body ? body : "", want,
                 field ? field : "", message ? message : "", r.status, r.body);
    }
    s_free(&r);
}

static const char *s_alice(void) {
    return cluster_token(s_c);
}

/* A new chat of token's user with text as its first message ("" for none: it waits) and
 * labels (a JSON object text, or NULL); its id, newly allocated. */
static char *s_create(const char *token, const char *text, const char *labels) {
    char *body =
        mem_printf("{\"content\":[%s%s%s]%s%s}", *text ? "{\"type\":\"text\",\"text\":\"" : "",
                   text, *text ? "\"}" : "", labels ? ",\"labels\":" : "", labels ? labels : "");
    resp_t r = s_http("POST", "/api/v2/chats", token, body);
    if (r.status != 201) {
        fail_msg("create %s: %ld %s", body, r.status, r.body);
    }
    char *id = mem_strdup(json_string_value(json_object_get(r.json, "id")));
    s_free(&r);
    free(body);
    return id;
}

static void s_idle(const char *chat) {
    char got[64];
    if (cluster_wait_status(s_c, chat, "waiting:true", WAIT_MS, got, sizeof got) != 0) {
        fail_msg("chat %s: still %s", chat, got);
    }
}

static void s_send(const char *token, const char *chat, const char *text) {
    char *path = mem_printf("/api/v2/chats/%s/messages", chat);
    char *body = mem_printf("{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]}", text);
    s_expect("POST", path, token, body, 200, NULL, NULL);
    free(body);
    free(path);
}

static void s_patch(const char *token, const char *chat, const char *body) {
    char *path = mem_printf("/api/v2/chats/%s", chat);
    s_expect("PATCH", path, token, body, 204, NULL, NULL);
    free(path);
}

/* GET /chats?query: the ids listed, comma-separated ("" when none). */
static char *s_list(const char *token, const char *query) {
    char *path = mem_printf("/api/v2/chats?%s", query);
    resp_t r = s_http("GET", path, token, NULL);
    if (r.status != 200 || !json_is_array(r.json)) {
        fail_msg("GET %s: %ld %s", path, r.status, r.body);
    }
    char *out = mem_strdup("");
    size_t i;
    json_t *c;
    json_array_foreach(r.json, i, c) {
        char *next =
            mem_printf("%s%s%s", out, i ? "," : "", json_string_value(json_object_get(c, "id")));
        free(out);
        out = next;
    }
    s_free(&r);
    free(path);
    return out;
}

static void s_list_is(const char *token, const char *query, const char *want) {
    char *got = s_list(token, query);
    if (strcmp(got, want) != 0) {
        fail_msg("GET /api/v2/chats?%s: want [%s], got [%s]", query, want, got);
    }
    free(got);
}

/* The chat's member name as JSON text (GET /chats/{id}); the caller frees. */
static char *s_member(const char *token, const char *chat, const char *name) {
    char *path = mem_printf("/api/v2/chats/%s", chat);
    resp_t r = s_http("GET", path, token, NULL);
    assert_int_equal(r.status, 200);
    char *v =
        json_dumps(json_object_get(r.json, name), JSON_ENCODE_ANY | JSON_SORT_KEYS | JSON_COMPACT);
    s_free(&r);
    free(path);
    return v;
}

static void s_member_is(const char *token, const char *chat, const char *name, const char *want) {
    char *got = s_member(token, chat, name);
    if (strcmp(got, want) != 0) {
        fail_msg("chat %s: %s want %s, got %s", chat, name, want, got);
    }
    free(got);
}

static char *s_join(const char *a, const char *b) {
    return mem_printf("%s%s%s", a, *a && *b ? "," : "", b);
}

/* ---- search ---- */

static void test_search_finds_a_word_of_the_third_message_and_only_the_callers_chats(void **u) {
    (void)u;
    char *a = s_create(s_alice(), "tell me about gardens", "{\"team\":\"red\"}");
    s_idle(a);
    s_send(s_alice(), a, "and now about " WORD " please");
    s_idle(a);
    /* The word is in the third message alone, not in the title or the first two. */
    char *where = cluster_sql(s_c,
                              "SELECT string_agg(n::text, ',') FROM (SELECT row_number() OVER"
                              " (ORDER BY id) AS n, content::text AS t FROM chat_messages WHERE"
                              " chat_id = '%s' AND visibility <> 'model') m WHERE t LIKE '%%" WORD
                              "%%' AND n <= 3",
                              a);
    assert_string_equal(where, "3");
    free(where);
    char *title = s_member(s_alice(), a, "title");
    assert_null(strstr(title, WORD));
    free(title);
    char *theirs = s_create(s_bob, "bob writes " WORD " too", NULL);
    char *other = s_create(s_alice(), "nothing to find here", "{\"team\":\"red\"}");
    char *gone = s_create(s_alice(), "archived " WORD " chat", NULL);
    char *blue = s_create(s_alice(), "a blue " WORD " chat", "{\"team\":\"blue\"}");
    s_idle(theirs);
    s_idle(other);
    s_idle(gone);
    s_idle(blue);
    s_patch(s_alice(), gone, "{\"archived\":true}");
    char *all = s_list(s_alice(), "q=" WORD);
    char *both = s_join(a, blue);
    char *both_r = s_join(blue, a);
    if (strcmp(all, both) != 0 && strcmp(all, both_r) != 0) {
        fail_msg("q=" WORD ": want %s and %s, got %s", a, blue, all);
    }
    s_list_is(s_bob, "q=" WORD, theirs);
    s_list_is(s_alice(), "q=zzzznomatch", "");
    /* archived: inside q, alone or with words; a contradiction is a 400 naming q. */
    s_list_is(s_alice(), "q=" WORD "%20archived%3Atrue", gone);
    s_list_is(s_alice(), "q=ARCHIVED%3Atrue%20" WORD "&archived=true", gone);
    char *archived = s_list(s_alice(), "q=archived%3Atrue");
    assert_non_null(strstr(archived, gone));
    assert_null(strstr(archived, a));
    free(archived);
    s_expect("GET", "/api/v2/chats?q=archived%3Atrue&archived=false", s_alice(), NULL, 400, "q",
             NULL);
    s_expect("GET", "/api/v2/chats?q=archived%3Atrue%20archived%3Afalse", s_alice(), NULL, 400, "q",
             NULL);
    /* With a label, and with the cursors: the list's own order, page by page. */
    s_list_is(s_alice(), "q=" WORD "&label=team%3Ared", a);
    s_list_is(s_alice(), "q=" WORD "&label=team%3Ablue", blue);
    char *first = mem_strndup(all, strcspn(all, ","));
    const char *second = all + strlen(first) + 1;
    s_list_is(s_alice(), "q=" WORD "&limit=1", first);
    char *q = mem_printf("q=" WORD "&after_id=%s", first);
    s_list_is(s_alice(), q, second);
    free(q);
    s_list_is(s_alice(), "q=" WORD "&offset=1", second);
    q = mem_printf("q=" WORD "&after_id=%s&offset=1", first);
    s_list_is(s_alice(), q, "");
    free(q);
    /* Bob's chat is no cursor of Alice's, searched or not. */
    q = mem_printf("q=" WORD "&after_id=%s", theirs);
    char *path = mem_printf("/api/v2/chats?%s", q);
    s_expect("GET", path, s_alice(), NULL, 400, "after_id", NULL);
    free(path);
    free(q);
    /* A title is searched as last written (migration 0019: the vector is made on the write):
     * renamed, the new word finds the chat and the old one no longer does; every row's vector
     * is its title's, created, titled by the worker or renamed. */
    s_patch(s_alice(), blue, "{\"title\":\"quokkaword renamed\"}");
    s_list_is(s_alice(), "q=quokkaword", blue);
    s_list_is(s_alice(), "q=" WORD "&label=team%3Ablue", blue); /* still in a message */
    s_patch(s_alice(), blue, "{\"title\":\"plain again\"}");
    s_list_is(s_alice(), "q=quokkaword", "");
    char *stale = cluster_sql(s_c, "SELECT count(*) FROM chats WHERE title_search IS DISTINCT"
                                   " FROM to_tsvector('english', title)");
    assert_string_equal(stale, "0");
    free(stale);
    free(first);
    free(both);
    free(both_r);
    free(all);
    free(a);
    free(theirs);
    free(other);
    free(gone);
    free(blue);
}

/* ---- labels ---- */

static void test_labels_filter_with_and_replace_all_and_are_capped(void **u) {
    (void)u;
    char *x = s_create(s_alice(), "", "{\"suite\":\"l\",\"env\":\"prod\",\"team\":\"red\"}");
    char *y = s_create(s_alice(), "", "{\"suite\":\"l\",\"env\":\"prod\"}");
    char *z = s_create(s_alice(), "", "{\"suite\":\"l\",\"team\":\"red\"}");
    s_member_is(s_alice(), x, "labels", "{\"env\":\"prod\",\"suite\":\"l\",\"team\":\"red\"}");
    s_list_is(s_alice(), "label=suite%3Al&label=env%3Aprod&label=team%3Ared", x);
    char *yx = s_join(y, x);
    s_list_is(s_alice(), "label=suite%3Al&label=env%3Aprod", yx);
    s_list_is(s_alice(), "label=suite%3Al&label=env%3Aprod&label=env%3Adev", "");
    /* Replace all: team is gone from x; {} clears. */
    s_patch(s_alice(), x, "{\"labels\":{\"suite\":\"l\",\"env\":\"dev\"}}");
    s_member_is(s_alice(), x, "labels", "{\"env\":\"dev\",\"suite\":\"l\"}");
    s_list_is(s_alice(), "label=suite%3Al&label=team%3Ared", z);
    s_patch(s_alice(), x, "{\"labels\":{}}");
    s_member_is(s_alice(), x, "labels", "{}");
    s_list_is(s_alice(), "label=suite%3Al&label=env%3Adev", "");
    /* 51 labels: "Invalid labels." naming labels, on PATCH and on POST; nothing changed. */
    char *many = mem_strdup("{");
    for (int i = 0; i < 51; i++) {
        char *next = mem_printf("%s%s\"k%d\":\"v\"", many, i ? "," : "", i);
        free(many);
        many = next;
    }
    char *body = mem_printf("{\"labels\":%s}}", many);
    char *path = mem_printf("/api/v2/chats/%s", y);
    s_expect("PATCH", path, s_alice(), body, 400, "labels", "Invalid labels.");
    free(body);
    body = mem_printf("{\"content\":[],\"labels\":%s}}", many);
    s_expect("POST", "/api/v2/chats", s_alice(), body, 400, "labels", "Invalid labels.");
    s_member_is(s_alice(), y, "labels", "{\"env\":\"prod\",\"suite\":\"l\"}");
    /* The member at fault is named; label filters are key:value. */
    s_expect("PATCH", path, s_alice(), "{\"labels\":{\"k\":1}}", 400, "labels.k",
             "Invalid labels.");
    s_expect("PATCH", path, s_alice(), "{\"labels\":{\"a:b\":\"c\"}}", 400, "labels[\"a:b\"]",
             "Invalid labels.");
    s_expect("PATCH", path, s_alice(), "{\"labels\":[]}", 400, "labels", "Invalid labels.");
    s_expect("GET", "/api/v2/chats?label=nocolon", s_alice(), NULL, 400, "label", NULL);
    s_expect("GET", "/api/v2/chats?label=%3Av", s_alice(), NULL, 400, "label", NULL);
    free(path);
    free(body);
    free(many);
    free(yx);
    free(x);
    free(y);
    free(z);
}

/* ---- pins ---- */

static void s_pin(const char *chat, int n) {
    char *body = mem_printf("{\"pin_order\":%d}", n);
    s_patch(s_pinner, chat, body);
    free(body);
}

static void s_pin_is(const char *chat, int want) {
    char *w = mem_printf("%d", want);
    s_member_is(s_pinner, chat, "pin_order", w);
    free(w);
}

static void test_pins_append_reorder_clamp_and_close_their_gaps(void **u) {
    (void)u;
    char *p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = s_create(s_pinner, "", "{\"suite\":\"pins\"}");
    }
    s_pin(p[0], 1);
    s_pin(p[1], 1);  /* unpinned: appended, 2 */
    s_pin(p[2], 99); /* appended, 3 */
    s_pin_is(p[1], 2);
    s_pin_is(p[2], 3);
    s_pin(p[2], 1);  /* moved up: p2 1, p0 2, p1 3 */
    s_pin(p[0], 99); /* clamped to the count: p2 1, p1 2, p0 3 */
    s_pin_is(p[2], 1);
    s_pin_is(p[1], 2);
    s_pin_is(p[0], 3);
    char *want = mem_printf("%s,%s,%s,%s", p[2], p[1], p[0], p[3]);
    s_list_is(s_pinner, "label=suite%3Apins", want);
    free(want);
    /* after_id walks the same order. */
    char *q = mem_printf("label=suite%%3Apins&after_id=%s&limit=2", p[1]);
    want = mem_printf("%s,%s", p[0], p[3]);
    s_list_is(s_pinner, q, want);
    free(want);
    free(q);
    s_pin(p[1], 0); /* unpinned: p2 1, p0 2 */
    s_pin_is(p[1], 0);
    s_pin_is(p[0], 2);
    char *path = mem_printf("/api/v2/chats/%s", p[3]);
    s_expect("PATCH", path, s_pinner, "{\"pin_order\":-1}", 400, "pin_order",
             "Pin order must be non-negative.");
    s_expect("PATCH", path, s_pinner, "{\"pin_order\":\"1\"}", 400, "pin_order", NULL);
    s_patch(s_pinner, p[3], "{\"archived\":true}");
    s_expect("PATCH", path, s_pinner, "{\"pin_order\":1}", 400, "pin_order",
             "Cannot pin an archived chat.");
    s_pin_is(p[3], 0);
    free(path);
    path = mem_printf("/api/v2/chats/%s", p[1]);
    s_expect("PATCH", path, s_pinner, "{\"archived\":true,\"pin_order\":1}", 400, "pin_order",
             "Cannot pin an archived chat.");
    free(path);
    /* Archiving a pinned chat unpins it and closes the gap. */
    s_patch(s_pinner, p[2], "{\"archived\":true}");
    s_pin_is(p[2], 0);
    s_pin_is(p[0], 1);
    for (int i = 0; i < 4; i++) {
        free(p[i]);
    }
}

typedef struct {
    const char *chat;
    long status;
} pinner_t;

static void *s_pin_thread(void *arg) {
    pinner_t *t = arg;
    char *path = mem_printf("/api/v2/chats/%s", t->chat);
    resp_t r = s_http("PATCH", path, s_pinner, "{\"pin_order\":1}");
    t->status = r.status;
    s_free(&r);
    free(path);
    return NULL;
}

#define S_RACE_OWNER "(SELECT owner_id FROM chats WHERE labels ->> 'suite' = 'race' LIMIT 1)"

static void test_concurrent_pins_never_share_a_place(void **u) {
    (void)u;
    pinner_t t[PINNERS];
    pthread_t th[PINNERS];
    for (int i = 0; i < PINNERS; i++) {
        t[i].chat = s_create(s_pinner, "", "{\"suite\":\"race\"}");
    }
    char *before = cluster_sql(
        s_c, "SELECT count(*) FROM chats WHERE pin_order > 0 AND owner_id = %s", S_RACE_OWNER);
    assert_non_null(before);
    char *end = NULL;
    long count = strtol(before, &end, 10);
    assert_true(end != before && *end == '\0' && count >= 0 && count <= PINNERS * 100);
    int pinned = (int)count;
    free(before);
    for (int i = 0; i < PINNERS; i++) {
        ASSERT(pthread_create(&th[i], NULL, s_pin_thread, &t[i]) == 0);
    }
    for (int i = 0; i < PINNERS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(t[i].status, 204);
    }
    /* Every pin of the user, 1..n, each place once. */
    char *got = cluster_sql(s_c,
                            "SELECT count(*) = %d AND count(DISTINCT pin_order) = %d"
                            " AND min(pin_order) = 1 AND max(pin_order) = %d FROM chats"
                            " WHERE pin_order > 0 AND owner_id = %s",
                            pinned + PINNERS, pinned + PINNERS, pinned + PINNERS, S_RACE_OWNER);
    assert_string_equal(got, "t");
    free(got);
    for (int i = 0; i < PINNERS; i++) {
        free((char *)t[i].chat);
    }
}

/* ---- offset ---- */

static void test_offset_pages_without_overlap_or_gap(void **u) {
    (void)u;
    for (int i = 0; i < 7; i++) {
        free(s_create(s_pager, "", NULL));
    }
    char *all = s_list(s_pager, "limit=200");
    char *pages = mem_strdup("");
    for (int off = 0; off < 9; off += 3) {
        char *q = mem_printf("limit=3&offset=%d", off);
        char *page = s_list(s_pager, q);
        char *next = s_join(pages, page);
        free(pages);
        pages = next;
        free(page);
        free(q);
    }
    assert_string_equal(pages, all);
    assert_int_equal(strlen(all), 7 * 36 + 6);
    s_list_is(s_pager, "offset=7", "");
    s_expect("GET", "/api/v2/chats?offset=10001", s_pager, NULL, 400, "offset", NULL);
    s_expect("GET", "/api/v2/chats?offset=-1", s_pager, NULL, 400, "offset", NULL);
    free(pages);
    free(all);
}

/* ---- every GET route ---- */

/* pattern with each "{}" given an id of the kind its segment names (the segment before it):
 * a real chat or message id, else a well-formed one (the parameter check runs before the
 * handler). */
static char *s_fill(const char *pattern, const char *chat, const char *message) {
    char *out = mem_strdup("");
    for (const char *p = pattern; *p;) {
        const char *at = strstr(p, "{}");
        size_t k = at ? (size_t)(at - p) : strlen(p);
        const char *id = "";
        if (at) {
            size_t seg_end = (size_t)(at - pattern) - 1; /* the '/' before "{}" */
            size_t seg = seg_end;
            while (seg > 0 && pattern[seg - 1] != '/') {
                seg--;
            }
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(seg_end - seg), pattern + seg);
            id = !strcmp(name, "chats")      ? chat
                 : !strcmp(name, "messages") ? message
                 : !strcmp(name, "console")  ? "index.html"
                                             : WELL_FORMED;
        }
        char *next = mem_printf("%s%.*s%s", out, (int)k, p, id);
        free(out);
        out = next;
        p += k + (at ? 2 : 0);
    }
    return out;
}

static void test_every_get_route_refuses_an_unknown_query_parameter(void **u) {
    (void)u;
    char *chat = s_create(s_alice(), "a chat for the route walk", NULL);
    s_idle(chat);
    char *msg = cluster_sql(s_c, "SELECT min(id) FROM chat_messages WHERE chat_id = '%s'", chat);
    assert_non_null(msg);
    int count = 0;
    http_route_t *routes = routes_all(&count);
    int walked = 0;
    int known = 0;
    for (int i = 0; i < count; i++) {
        if (strcmp(routes[i].method, "GET") != 0) {
            continue;
        }
        char *base = s_fill(routes[i].pattern, chat, msg);
        char *path = mem_printf("%s?" UNKNOWN_Q "=1", base);
        resp_t r = s_http_t("GET", path, s_alice(), NULL, 3000);
        if (r.status != 400 || strcmp(s_field(&r), UNKNOWN_Q) != 0) {
            fail_msg("GET %s: want 400 naming " UNKNOWN_Q ", got %ld %s", path, r.status, r.body);
        }
        s_free(&r);
        free(path);
        /* Each parameter the route names passes the check (its value may still be refused),
         * and given twice is refused unless it is repeatable (a name ending in '*'). */
        const char *q = routes[i].query ? routes[i].query : "";
        for (const char *p = q + strspn(q, " "); *p; p += strspn(p, " ")) {
            size_t k = strcspn(p, " ");
            bool many = p[k - 1] == '*';
            int n = (int)(k - many);
            path = mem_printf("%s?%.*s=1", base, n, p);
            r = s_http_t("GET", path, s_alice(), NULL, 3000);
            const char *detail = json_string_value(json_object_get(
                json_array_get(json_object_get(r.json, "validations"), 0), "detail"));
            if (r.status == 400 && detail && !strcmp(detail, NOT_A_PARAM)) {
                fail_msg("GET %s: a parameter of the route refused as unknown: %s", path, r.body);
            }
            s_free(&r);
            free(path);
            path = mem_printf("%s?%.*s=1&%.*s=1", base, n, p, n, p);
            r = s_http_t("GET", path, s_alice(), NULL, 3000);
            detail = json_string_value(json_object_get(
                json_array_get(json_object_get(r.json, "validations"), 0), "detail"));
            bool twice = r.status == 400 && detail && !strcmp(detail, TWICE);
            if (twice == many) {
                fail_msg("GET %s: %s", path,
                         many ? "a repeatable parameter refused twice" : "a parameter taken twice");
            }
            s_free(&r);
            free(path);
            known++;
            p += k;
        }
        free(base);
        walked++;
    }
    assert_true(walked >= 10);
    assert_true(known >= 9); /* the list's six, messages' three, the stream's one */
    free(routes);
    free(msg);
    free(chat);
}

/* ---- has_unread ---- */

static void s_unread_is(const char *chat, const char *want) {
    s_member_is(s_alice(), chat, "has_unread", want);
}

/* Waits until has_unread is want (a stream's mark is written on the stream's own clock). */
static void s_unread_becomes(const char *chat, const char *want) {
    for (int i = 0; i < WAIT_MS / 100; i++) {
        char *got = s_member(s_alice(), chat, "has_unread");
        bool ok = !strcmp(got, want);
        free(got);
        if (ok) {
            return;
        }
        usleep(100 * 1000);
    }
    fail_msg("chat %s: has_unread never became %s", chat, want);
}

static void test_has_unread_turns_on_with_an_answer_and_off_when_the_owner_reads(void **u) {
    (void)u;
    /* The answer takes a second or so: before it, nothing is unread. */
    char *chat = s_create(s_alice(), "hello [sim:slow 200] [sim:words 6]", NULL);
    s_unread_is(chat, "false");
    s_idle(chat);
    s_unread_is(chat, "true");
    char *path = mem_printf("/api/v2/chats/%s/messages", chat);
    s_expect("GET", path, s_alice(), NULL, 200, NULL, NULL);
    s_unread_is(chat, "false");
    /* Another user reading is a 404 and changes nothing. */
    s_send(s_alice(), chat, "again [sim:words 2]");
    s_idle(chat);
    s_unread_is(chat, "true");
    s_expect("GET", path, s_bob, NULL, 404, NULL, NULL);
    s_unread_is(chat, "true");
    /* Reading through the stream: its catch-up, then what it delivers while open. */
    char *url = mem_printf("%s/api/v2/chats/%s/stream", cluster_url(s_c, 0), chat);
    sse_t *s = sse_open(url, s_alice(), 0);
    assert_true(sse_wait(s, 0, "message", NULL, NULL, WAIT_MS) >= 0);
    s_unread_becomes(chat, "false");
    s_send(s_alice(), chat, "once more [sim:words 2]");
    s_idle(chat);
    s_unread_becomes(chat, "false");
    sse_close(&s);
    s_send(s_alice(), chat, "unread again [sim:words 2]");
    s_idle(chat);
    s_unread_is(chat, "true");
    free(url);
    free(path);
    free(chat);
}

/* ---- setup ---- */

static int s_setup(void **state) {
    (void)state;
    cluster_opts_t o = {.name = "test_chat_organization", .gateways = 1, .workers = 1};
    s_c = cluster_new(&o);
    s_bob = cluster_user_add(s_c, false, "bob");
    s_pinner = cluster_user_add(s_c, false, "pinner");
    s_pager = cluster_user_add(s_c, false, "pager");
    return 0;
}

static int s_teardown(void **state) {
    (void)state;
    int unclean = cluster_destroy(&s_c);
    free(s_bob);
    free(s_pinner);
    free(s_pager);
    return unclean == 0 ? 0 : -1;
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_search_finds_a_word_of_the_third_message_and_only_the_callers_chats),
        cmocka_unit_test(test_labels_filter_with_and_replace_all_and_are_capped),
        cmocka_unit_test(test_pins_append_reorder_clamp_and_close_their_gaps),
        cmocka_unit_test(test_concurrent_pins_never_share_a_place),
        cmocka_unit_test(test_offset_pages_without_overlap_or_gap),
        cmocka_unit_test(test_every_get_route_refuses_an_unknown_query_parameter),
        cmocka_unit_test(test_has_unread_turns_on_with_an_answer_and_off_when_the_owner_reads),
    };
    int rc = cmocka_run_group_tests(tests, s_setup, s_teardown);
    curl_global_cleanup();
    return rc;
}
