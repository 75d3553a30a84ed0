// graphile.js: the reference side of tests/bench/scale/run: graphile-worker (installed by the
// run script from tests/bench/compare/package.json) holding many concurrent jobs that each
// sleep, the way a chatfleet turn waits on a slow model.
//
//   node graphile.js setup                graphile-worker's schema (its own migrations)
//   node graphile.js enqueue N MS         N jobs 'scale_sleep' ({ms: MS}) in one add_jobs call
//   node graphile.js work CONCURRENCY     one runner with that concurrency; prints "ready" once
//                                         it runs, then every second and at SIGTERM a line
//                                         "stats running=R peak=P completed=C"
//
// DATABASE_URL names the database. The runner's connections carry application_name
// 'graphile-scale' so that the run script can count them in pg_stat_activity. Everything else
// is graphile-worker's default (maxPoolSize 10, pollInterval 2000 ms plus LISTEN/NOTIFY).
'use strict';

const { Pool } = require('pg');

const url = process.env.DATABASE_URL;
const APP = 'graphile-scale';

function die(msg) {
    console.error(`graphile.js: ${msg}`);
    process.exit(2);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function withApp(u, name) {
    return `${u}${u.includes('?') ? '&' : '?'}application_name=${name}`;
}

async function setup() {
    const { runMigrations } = require('graphile-worker');
    await runMigrations({ connectionString: withApp(url, 'graphile-scale-setup') });
}

async function enqueue(n, ms) {
    const pool = new Pool({ connectionString: withApp(url, 'graphile-scale-enqueue'), max: 1 });
    // graphile-worker's documented bulk form: add_jobs with an array of job specs.
    const specs = Array.from({ length: n }, () => ({ identifier: 'scale_sleep', payload: { ms } }));
    for (let i = 0; i < specs.length; i += 5000) {
        await pool.query(
            'SELECT graphile_worker.add_jobs(array(SELECT json_populate_recordset(' +
                'null::graphile_worker.job_spec, $1::json)))',
            [JSON.stringify(specs.slice(i, i + 5000))]
        );
    }
    await pool.end();
}

async function work(concurrency) {
    const { run } = require('graphile-worker');
    let running = 0;
    let peak = 0;
    let completed = 0;
    const runner = await run({
        connectionString: withApp(url, APP),
        concurrency,
        noHandleSignals: true,
        taskList: {
            scale_sleep: async (payload) => {
                running++;
                if (running > peak) peak = running;
                try {
                    await sleep(Number(payload.ms) || 0);
                } finally {
                    running--;
                    completed++;
                }
            },
        },
    });
    const stats = () => `stats running=${running} peak=${peak} completed=${completed}`;
    const timer = setInterval(() => process.stdout.write(`${stats()}\n`), 1000);
    const stop = async () => {
        clearInterval(timer);
        process.stdout.write(`${stats()}\n`);
        await runner.stop().catch(() => {});
        process.exit(0);
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
    runner.promise.catch((e) => console.error(`graphile-worker: ${e.message}`));
    process.stdout.write('ready\n');
}

async function main() {
    if (!url) die('DATABASE_URL is not set');
    const [cmd, a, b] = process.argv.slice(2);
    if (cmd === 'setup') await setup();
    else if (cmd === 'enqueue') await enqueue(Number(a), Number(b));
    else if (cmd === 'work') return work(Number(a));
    else die(`unknown command ${cmd}`);
    process.exit(0);
}

main().catch((e) => die(e.stack || String(e)));
