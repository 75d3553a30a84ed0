// peer.js: the pg-boss and graphile-worker side of tests/bench/compare/run.
//
//   node peer.js setup                       bench tables, both peers' schemas, the queues
//   node peer.js enqueue SYSTEM N RUN        N short jobs in one call (bulk), before workers run
//   node peer.js work SYSTEM PROFILE         one worker process; prints "ready" once it polls
//   node peer.js lat SYSTEM N RUN            N short jobs one at a time: enqueue -> handler start
//   node peer.js long SYSTEM RUN PROFILE     enqueue one long job (a handler that sleeps)
//
// SYSTEM is pgboss or graphile. PROFILE is default (the library's defaults), tight (its
// tightest documented recovery and poll settings) or bulk (the throughput run: defaults plus
// the concurrency each library documents for it; see tests/bench/README.md). A short job's
// handler writes one row into bench_done in the same database (one durable state change per
// job, like a chatfleet turn's commit) and completes; a long job's handler writes one row into
// bench_starts and sleeps. The database URL is DATABASE_URL.
'use strict';

const { Pool } = require('pg');

const url = process.env.DATABASE_URL;
const LONG_S = Number(process.env.COMPARE_LONG_S || 10);
const BULK_CONCURRENCY = Number(process.env.COMPARE_PEER_CONCURRENCY || 8);
const BULK_BATCH = Number(process.env.COMPARE_PGBOSS_BATCH || 50);

function die(msg) {
    console.error(`peer.js: ${msg}`);
    process.exit(2);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The settings of each profile. pg-boss 10: pollingIntervalSeconds (default 2, minimum 0.5),
// maintenanceIntervalSeconds (default 120; it runs the expiry of active jobs), expireInSeconds
// (default 15 minutes; the only thing that frees a job whose process died, and also the
// maximum run time of a healthy job). graphile-worker 0.17: pollInterval (default 2000 ms, on
// top of LISTEN/NOTIFY), concurrency (default 1); a crashed worker's jobs stay locked for
// 4 hours, a constant in its SQL, swept every 8-10 minutes.
function pgbossSettings(profile) {
    const s = { boss: {}, work: {}, queue: {} };
    if (profile === 'tight') {
        s.boss = { maintenanceIntervalSeconds: 1, monitorStateIntervalSeconds: 1 };
        s.work = { pollingIntervalSeconds: 0.5 };
        // The tightest expiry that still lets a healthy long job (LONG_S) finish.
        s.queue = { expireInSeconds: LONG_S + 1 };
    } else if (profile === 'bulk') {
        s.work = { pollingIntervalSeconds: 0.5, batchSize: BULK_BATCH };
    }
    return s;
}

function graphileSettings(profile) {
    if (profile === 'tight') return { pollInterval: 100 };
    if (profile === 'bulk') return { concurrency: BULK_CONCURRENCY };
    return {};
}

async function shortHandler(pool, data, started) {
    await pool.query('INSERT INTO bench_done (run, job, pid, lat_ms) VALUES ($1, $2, $3, $4)', [
        data.run,
        data.job,
        process.pid,
        started - data.t0,
    ]);
}

async function longHandler(pool, data, started) {
    await pool.query('INSERT INTO bench_starts (run, job, pid, t_ms) VALUES ($1, $2, $3, $4)', [
        data.run,
        data.job,
        process.pid,
        started,
    ]);
    await sleep(LONG_S * 1000);
}

async function pgboss(profile, opts = {}) {
    const PgBoss = require('pg-boss');
    const s = pgbossSettings(profile);
    const boss = new PgBoss({ connectionString: url, max: 4, ...s.boss, ...opts });
    boss.on('error', (e) => console.error(`pg-boss: ${e.message}`));
    await boss.start();
    return { boss, s };
}

async function setup() {
    const pool = new Pool({ connectionString: url, max: 1 });
    await pool.query(`CREATE TABLE IF NOT EXISTS bench_done (run text NOT NULL, job text NOT NULL,
        pid int NOT NULL, lat_ms double precision NOT NULL,
        done_at timestamptz NOT NULL DEFAULT clock_timestamp())`);
    await pool.query('CREATE INDEX IF NOT EXISTS bench_done_run ON bench_done (run, job)');
    await pool.query(`CREATE TABLE IF NOT EXISTS bench_starts (run text NOT NULL, job text NOT NULL,
        pid int NOT NULL, t_ms bigint NOT NULL)`);
    await pool.end();
    const { runMigrations } = require('graphile-worker');
    await runMigrations({ connectionString: url });
    const { boss } = await pgboss('default', { supervise: false, schedule: false });
    for (const q of ['bench_short', 'bench_long', 'bench_long_tight']) {
        const o = q === 'bench_long_tight' ? pgbossSettings('tight').queue : {};
        await boss.createQueue(q, o);
    }
    await boss.stop({ graceful: false, wait: true });
}

async function enqueue(system, n, run) {
    const t0 = Date.now();
    const jobs = [];
    for (let i = 0; i < n; i++) jobs.push({ run, job: String(i), t0 });
    if (system === 'pgboss') {
        const { boss } = await pgboss('default', { supervise: false, schedule: false });
        for (let i = 0; i < jobs.length; i += 1000) {
            await boss.insert(jobs.slice(i, i + 1000).map((d) => ({ name: 'bench_short', data: d })));
        }
        await boss.stop({ graceful: false, wait: true });
    } else {
        // graphile-worker's documented bulk form: add_jobs with an array of job specs.
        const pool = new Pool({ connectionString: url, max: 1 });
        const specs = jobs.map((d) => ({ identifier: 'bench_short', payload: d }));
        await pool.query(
            'SELECT graphile_worker.add_jobs(array(SELECT json_populate_recordset(' +
                'null::graphile_worker.job_spec, $1::json)))',
            [JSON.stringify(specs)]
        );
        await pool.end();
    }
}

async function work(system, profile) {
    const pool = new Pool({ connectionString: url, max: BULK_CONCURRENCY });
    if (system === 'pgboss') {
        const { boss, s } = await pgboss(profile, { schedule: false });
        await boss.work('bench_short', s.work, async (jobs) => {
            const started = Date.now();
            await Promise.all(jobs.map((j) => shortHandler(pool, j.data, started)));
        });
        const longQueue = profile === 'tight' ? 'bench_long_tight' : 'bench_long';
        await boss.work(longQueue, s.work, async (jobs) => {
            const started = Date.now();
            await Promise.all(jobs.map((j) => longHandler(pool, j.data, started)));
        });
    } else {
        const { run } = require('graphile-worker');
        const runner = await run({
            connectionString: url,
            noHandleSignals: false,
            ...graphileSettings(profile),
            taskList: {
                bench_short: async (payload) => shortHandler(pool, payload, Date.now()),
                bench_long: async (payload) => longHandler(pool, payload, Date.now()),
            },
        });
        runner.promise.catch((e) => console.error(`graphile-worker: ${e.message}`));
    }
    process.stdout.write('ready\n');
}

function pct(sorted, p) {
    let i = Math.floor(sorted.length * p);
    if (i >= sorted.length) i = sorted.length - 1;
    return sorted[i];
}

// Jobs one at a time into an idle worker: the enqueue call's start to the handler's start
// (both from this machine's clock), so the figure is the peer's pick-up delay.
async function lat(system, n, run) {
    const pool = new Pool({ connectionString: url, max: 1 });
    let boss = null;
    if (system === 'pgboss') ({ boss } = await pgboss('default', { supervise: false, schedule: false }));
    const out = [];
    for (let i = 0; i < n; i++) {
        const data = { run, job: String(i), t0: Date.now() };
        if (boss) await boss.send('bench_short', data);
        else await pool.query("SELECT graphile_worker.add_job('bench_short', $1::json)", [data]);
        const deadline = Date.now() + 30000;
        for (;;) {
            const r = await pool.query('SELECT lat_ms FROM bench_done WHERE run = $1 AND job = $2', [
                run,
                data.job,
            ]);
            if (r.rows.length) {
                out.push(r.rows[0].lat_ms);
                break;
            }
            if (Date.now() > deadline) die(`${system}: job ${i} not started in 30 s`);
            await sleep(1);
        }
    }
    if (boss) await boss.stop({ graceful: false, wait: true });
    await pool.end();
    out.sort((a, b) => a - b);
    console.log(`${pct(out, 0.5).toFixed(1)} ${pct(out, 0.99).toFixed(1)}`);
}

async function long(system, run, profile) {
    const data = { run, job: 'long', t0: Date.now() };
    if (system === 'pgboss') {
        const { boss } = await pgboss('default', { supervise: false, schedule: false });
        await boss.send(profile === 'tight' ? 'bench_long_tight' : 'bench_long', data);
        await boss.stop({ graceful: false, wait: true });
    } else {
        const pool = new Pool({ connectionString: url, max: 1 });
        await pool.query("SELECT graphile_worker.add_job('bench_long', $1::json)", [data]);
        await pool.end();
    }
}

async function main() {
    if (!url) die('DATABASE_URL is not set');
    const [cmd, a, b, c] = process.argv.slice(2);
    if (cmd === 'setup') await setup();
    else if (cmd === 'enqueue') await enqueue(a, Number(b), c);
    else if (cmd === 'work') return work(a, b || 'default');
    else if (cmd === 'lat') await lat(a, Number(b), c);
    else if (cmd === 'long') await long(a, b, c || 'default');
    else die(`unknown command ${cmd}`);
    process.exit(0);
}

main().catch((e) => die(e.stack || String(e)));
