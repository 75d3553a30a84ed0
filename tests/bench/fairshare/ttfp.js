// ttfp.js: the client side of tests/bench/fairshare/run, through the gateway's REST API.
//
//   node ttfp.js flood URL TOKEN N TEXT   N chats of one user, each created with one user
//                                         message TEXT, 16 requests in flight; prints
//                                         "created failed"
//   node ttfp.js users URL TOKENS TEXT [ROUNDS]
//                                         ROUNDS (1) times, one after another: one chat per
//                                         token (comma-separated), all at once,
//                                         "[sim:clock] TEXT": each user's time to first part,
//                                         from the start of its POST to the sim's stamp on the
//                                         reply's first part, read from the chat's stream (the
//                                         monotonic clock both read);
//                                         prints "p50 max n" in ms over every round (n: chats
//                                         that got a part), or "- - 0" when none did
'use strict';

const http = require('http');

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

function request(url, token, method, body) {
    return new Promise((resolve, reject) => {
        const data = body ? JSON.stringify(body) : '';
        const req = http.request(
            url,
            {
                method,
                agent,
                headers: {
                    Authorization: `Bearer ${token}`,
                    'Content-Type': 'application/json',
                    'Content-Length': Buffer.byteLength(data),
                },
            },
            (res) => {
                let text = '';
                res.setEncoding('utf8');
                res.on('data', (c) => (text += c));
                res.on('end', () => resolve({ status: res.statusCode, text }));
            },
        );
        req.on('error', reject);
        req.end(data);
    });
}

function createChat(base, token, text) {
    return request(`${base}/api/v2/chats`, token, 'POST', {
        content: [{ type: 'text', text }],
    }).then((r) => {
        if (r.status !== 201) {
            throw new Error(`POST /chats: ${r.status} ${r.text}`);
        }
        return JSON.parse(r.text).id;
    });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The monotonic microseconds (CLOCK_MONOTONIC, as the sim's [sim:clock] stamps) at which the
// chat's reply sent its first part: the "@MICROS@" stamp of the first message_part event on the
// chat's stream, which replays the running step's parts to a stream opened late.
function firstPartUs(base, token, chat, deadlineMs) {
    return new Promise((resolve, reject) => {
        const req = http.get(
            `${base}/api/v2/chats/${chat}/stream`,
            { headers: { Authorization: `Bearer ${token}`, Accept: 'text/event-stream' } },
            (res) => {
                if (res.statusCode !== 200) {
                    res.resume();
                    reject(new Error(`stream: ${res.statusCode}`));
                    return;
                }
                let seen = '';
                res.setEncoding('utf8');
                res.on('data', (c) => {
                    seen += c;
                    const at = seen.indexOf('event: message_part');
                    const stamp = at >= 0 && /@(\d+)@/.exec(seen.slice(at));
                    if (stamp) {
                        req.destroy();
                        resolve(Number(stamp[1]));
                    } else if (/event: message\ndata: [^\n]*"role":\s*"assistant"/.test(seen)) {
                        // The reply was committed before the stream saw a part of it: the
                        // part's time is lost, and the chat is counted as not seen.
                        req.destroy();
                        reject(new Error('the reply was committed before the stream opened'));
                    }
                });
                res.on('end', () => reject(new Error('stream ended without a part')));
            },
        );
        req.on('error', reject);
        const timer = setTimeout(() => {
            req.destroy();
            reject(new Error(`no part in ${deadlineMs} ms`));
        }, deadlineMs);
        timer.unref();
    });
}

async function flood(base, token, n, text) {
    let next = 0;
    let created = 0;
    let failed = 0;
    async function lane() {
        while (next < n) {
            next++;
            try {
                await createChat(base, token, text);
                created++;
            } catch (e) {
                failed++;
                if (failed === 1) {
                    console.error(`ttfp: ${e.message}`);
                }
            }
        }
    }
    await Promise.all(Array.from({ length: 16 }, lane));
    console.log(`${created} ${failed}`);
}

async function users(base, tokens, text, rounds) {
    let times = [];
    for (let r = 0; r < rounds; r++) {
        times = times.concat(await usersOnce(base, tokens, text));
    }
    const ok = times.filter((t) => t !== null).sort((a, b) => a - b);
    if (ok.length === 0) {
        console.log('- - 0');
        return;
    }
    const p50 = ok[Math.floor((ok.length - 1) / 2)];
    console.log(`${p50.toFixed(1)} ${ok[ok.length - 1].toFixed(1)} ${ok.length}`);
}

// One round: one chat per token at once; each one's time to first part in ms, or null.
function usersOnce(base, tokens, text) {
    return Promise.all(
        tokens.map(async (token) => {
            const t0 = Number(process.hrtime.bigint() / 1000n);
            try {
                const chat = await createChat(base, token, `[sim:clock] ${text}`);
                return ((await firstPartUs(base, token, chat, 300000)) - t0) / 1000;
            } catch (e) {
                console.error(`ttfp: ${e.message}`);
                return null;
            }
        }),
    );
}

const [mode, base, token, a, b] = process.argv.slice(2);
const run =
    mode === 'flood'
        ? flood(base, token, Number(a), b)
        : users(base, token.split(','), a, Number(b || 1));
run.then(
    () => process.exit(0),
    (e) => {
        console.error(`ttfp: ${e.stack}`);
        process.exit(1);
    },
);
