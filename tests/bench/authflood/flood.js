// flood.js: a legitimate client's latency while another floods the gateway with bad tokens
// (tests/bench/authflood/run). One process, two kept-alive agents:
//   node flood.js URL TOKEN LEGIT_N BAD_N CONCURRENCY RATE
// The legitimate client sends GET /api/v2/users/me one after another with TOKEN: LEGIT_N of
// them, or with BAD_N > 0 as many as it can while a flood sends BAD_N requests with distinct
// random tokens, CONCURRENCY at a time and at most RATE a second, request i not before i/RATE
// s (so that every figure is taken during the flood; at least 50). Prints "p50_ms p99_ms legit_n legit_ok flood_401 flood_429 flood_other".
'use strict';
const http = require('http');
const crypto = require('crypto');

const [url, token, legitN, badN, conc, rate] = process.argv.slice(2);
const base = new URL('/api/v2/users/me', url);
const legitAgent = new http.Agent({ keepAlive: true, maxSockets: 1 });
const floodAgent = new http.Agent({ keepAlive: true, maxSockets: Number(conc) });

function get(agent, tok) {
    return new Promise((resolve) => {
        const req = http.request(base, { agent, headers: { Authorization: `Bearer ${tok}` } }, (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode));
        });
        req.on('error', () => resolve(0));
        req.end();
    });
}

let floodSent = 0;
let floodOver = false;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function flood(n, c, counts) {
    const t0 = Date.now();
    async function lane() {
        while (floodSent < n) {
            const due = t0 + (floodSent * 1000) / Number(rate);
            floodSent++;
            if (due > Date.now()) await sleep(due - Date.now());
            const s = await get(floodAgent, crypto.randomBytes(24).toString('hex'));
            counts[s === 401 ? 0 : s === 429 ? 1 : 2]++;
        }
    }
    await Promise.all(Array.from({ length: c }, lane));
}

async function main() {
    const counts = [0, 0, 0];
    const bad = Number(badN);
    const flooding = bad > 0 ? flood(bad, Number(conc), counts).then(() => (floodOver = true)) : null;
    const lat = [];
    let ok = 0;
    for (let i = 0; flooding ? !floodOver || i < 50 : i < Number(legitN); i++) {
        const t0 = process.hrtime.bigint();
        if ((await get(legitAgent, token)) === 200) ok++;
        lat.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    if (flooding) await flooding;
    lat.sort((a, b) => a - b);
    const q = (p) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))].toFixed(2);
    console.log(`${q(0.5)} ${q(0.99)} ${lat.length} ${ok} ${counts[0]} ${counts[1]} ${counts[2]}`);
    legitAgent.destroy();
    floodAgent.destroy();
}
main();
