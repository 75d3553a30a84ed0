// chatfleet.js: the chatfleet client side of tests/bench/compare/run, through the gateway's
// REST API (CHATFLEET_URL, CHATFLEET_TOKEN) and reads of PostgreSQL (DATABASE_URL).
//
//   node chatfleet.js enqueue N TEXT    N chats, each created with one user message TEXT
//                                       (8 requests in flight); prints the chat ids
//   node chatfleet.js lat N LOG         N "[sim:stall]" chats one at a time: POST start ->
//                                       the worker's own clock at its chat_acquired line in
//                                       LOG (its stderr, CHATFLEET_LOG=info), as the peers'
//                                       figure is their handler's clock; prints "p50 p99" ms
'use strict';

const fs = require('fs');
const http = require('http');

const base = `${process.env.CHATFLEET_URL}/api/v2`;
const headers = {
    Authorization: `Bearer ${process.env.CHATFLEET_TOKEN}`,
    'Content-Type': 'application/json',
};
// Node's own HTTP client on kept-alive connections, as the peers' enqueue is a query on a
// pooled connection: a POST through fetch (undici) took about 1 ms longer on the bench
// machine, which is the client's, not the system's (tests/bench/README.md).
const agent = new http.Agent({ keepAlive: true });

function createChat(text) {
    const body = JSON.stringify({ content: [{ type: 'text', text }] });
    return new Promise((resolve, reject) => {
        const req = http.request(
            `${base}/chats`,
            {
                method: 'POST',
                agent,
                headers: { ...headers, 'Content-Length': Buffer.byteLength(body) },
            },
            (res) => {
                let text = '';
                res.setEncoding('utf8');
                res.on('data', (c) => (text += c));
                res.on('end', () => {
                    if (res.statusCode !== 201) {
                        reject(new Error(`POST /chats: HTTP ${res.statusCode} ${text}`));
                        return;
                    }
                    try {
                        resolve(JSON.parse(text).id);
                    } catch (e) {
                        reject(new Error(`POST /chats: ${e.message}`));
                    }
                });
                res.on('error', reject);
            },
        );
        req.on('error', reject);
        req.end(body);
    });
}

async function enqueue(n, text) {
    let next = 0;
    const ids = [];
    const lane = async () => {
        while (next < n) {
            next++;
            ids.push(await createChat(text));
        }
    };
    await Promise.all(Array.from({ length: 8 }, lane));
    console.log(ids.join('\n'));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The worker's timestamp of its chat_acquired line for chat id (logged after the acquisition
// committed), in ms since the epoch, or null while there is none. Its clock is this machine's,
// with millisecond resolution, as Date.now() is.
function acquiredAt(log, id) {
    const text = fs.readFileSync(log, 'utf8');
    const m = new RegExp(`^ts=(\\S+) .*event=chat_acquired chat_id=${id} `, 'm').exec(text);
    return m ? Date.parse(m[1]) : null;
}

async function lat(n, log) {
    const out = [];
    // Sample -1 is a warm-up, not counted: a hint published before the new worker's
    // subscription reached the gateway's publisher is lost (ZeroMQ's slow joiner), and only
    // the acquire poll (30 s by default) would find that chat.
    for (let i = -1; i < n; i++) {
        const t0 = Date.now();
        const id = await createChat('[sim:stall]');
        const deadline = Date.now() + (i < 0 ? 45000 : 30000);
        let at;
        // This wait only finds the line; the figure is the worker's own clock, so how often
        // it looks does not count (as peer.js reads its peers' handler clocks).
        while ((at = acquiredAt(log, id)) === null) {
            if (Date.now() > deadline) throw new Error(`chat ${id} not acquired in 30 s`);
            await sleep(2);
        }
        if (i >= 0) out.push(at - t0);
    }
    out.sort((a, b) => a - b);
    const pct = (p) => out[Math.min(out.length - 1, Math.floor(out.length * p))];
    console.log(`${pct(0.5).toFixed(1)} ${pct(0.99).toFixed(1)}`);
}

const [cmd, a, b] = process.argv.slice(2);
(cmd === 'enqueue' ? enqueue(Number(a), b || 'hi') : lat(Number(a), b))
    .then(() => agent.destroy())
    .catch((e) => {
        console.error(`chatfleet.js: ${e.message}`);
        process.exit(2);
    });
