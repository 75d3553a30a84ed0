// chatfleet.js: the chatfleet client side of tests/bench/compare/run, through the gateway's
// REST API (CHATFLEET_URL, CHATFLEET_TOKEN) and reads of PostgreSQL (DATABASE_URL).
//
//   node chatfleet.js enqueue N TEXT    N chats, each created with one user message TEXT
//                                       (8 requests in flight); prints the chat ids
//   node chatfleet.js lat N             N "[sim:stall]" chats one at a time: POST start ->
//                                       the chat's worker_id set; prints "p50 p99" in ms
'use strict';

const { Pool } = require('pg');

const base = `${process.env.CHATFLEET_URL}/api/v2`;
const headers = {
    Authorization: `Bearer ${process.env.CHATFLEET_TOKEN}`,
    'Content-Type': 'application/json',
};

async function createChat(text) {
    const r = await fetch(`${base}/chats`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ content: [{ type: 'text', text }] }),
    });
    if (!r.ok) throw new Error(`POST /chats: HTTP ${r.status} ${await r.text()}`);
    return (await r.json()).id;
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

async function lat(n) {
    const pool = new Pool({ connectionString: process.env.DATABASE_URL, max: 1 });
    const out = [];
    // Sample -1 is a warm-up, not counted: a hint published before the new worker's
    // subscription reached the gateway's publisher is lost (ZeroMQ's slow joiner), and only
    // the acquire poll (30 s by default) would find that chat.
    for (let i = -1; i < n; i++) {
        const t0 = performance.now();
        const id = await createChat('[sim:stall]');
        const deadline = Date.now() + (i < 0 ? 45000 : 30000);
        for (;;) {
            const r = await pool.query(
                'SELECT 1 FROM chats WHERE id = $1 AND worker_id IS NOT NULL', [id]);
            if (r.rows.length) break;
            if (Date.now() > deadline) throw new Error(`chat ${id} not acquired in 30 s`);
            // As peer.js polls its peers: a busy loop of queries would take a core from the
            // worker and PostgreSQL on a two-core machine. (The peers' figure is their
            // handler's own clock, so this poll's delay, under 2 ms, counts against chatfleet.)
            await sleep(1);
        }
        if (i >= 0) out.push(performance.now() - t0);
    }
    await pool.end();
    out.sort((a, b) => a - b);
    const pct = (p) => out[Math.min(out.length - 1, Math.floor(out.length * p))];
    console.log(`${pct(0.5).toFixed(1)} ${pct(0.99).toFixed(1)}`);
}

const [cmd, a, b] = process.argv.slice(2);
(cmd === 'enqueue' ? enqueue(Number(a), b || 'hi') : lat(Number(a))).catch((e) => {
    console.error(`chatfleet.js: ${e.message}`);
    process.exit(2);
});
