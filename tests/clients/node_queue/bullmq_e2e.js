#!/usr/bin/env node
// End-to-end check of cairn with BullMQ, a job queue whose every state
// change is a Lua script (EVALSHA) over lists, sorted sets, hashes and a
// stream of events. Adds jobs (plain, bulk, delayed, prioritised, retried,
// failing, deduplicated by id), processes them with a concurrent worker,
// and checks results, counts and the events stream.
//
// Usage: node bullmq_e2e.js PORT   (module path from NODE_PATH)
'use strict';

const { Queue, Worker, QueueEvents, FlowProducer } = require('bullmq');

const port = Number(process.argv[2] || 6379);
const connection = { host: '127.0.0.1', port, maxRetriesPerRequest: null };

const { fail, eq, ok } = require('./check');
function withTimeout(p, ms, what) {
  let t;
  return Promise.race([
    p,
    new Promise((_, rej) => { t = setTimeout(() => rej(new Error(`timed out: ${what}`)), ms); }),
  ]).finally(() => clearTimeout(t));
}

async function main() {
  const name = `e2e-${process.pid}`;
  const queue = new Queue(name, { connection });
  const events = new QueueEvents(name, { connection });
  await events.waitUntilReady();
  queue.on('error', (e) => fail(`queue error: ${e.message}`));
  events.on('error', (e) => fail(`queue events error: ${e.message}`));

  const completedEvents = new Set();
  events.on('completed', ({ jobId }) => completedEvents.add(jobId));

  // Jobs: 20 in bulk, a delayed one, prioritised ones, one that fails once
  // then succeeds, one that always fails, and a duplicate job id.
  const bulk = await queue.addBulk(
    Array.from({ length: 20 }, (_, i) => ({ name: 'square', data: { n: i } })));
  eq('addBulk count', bulk.length, 20);
  const t0 = Date.now();
  const delayed = await queue.add('square', { n: 100 }, { delay: 400 });
  await queue.add('square', { n: 200 }, { priority: 1 });
  await queue.add('square', { n: 201 }, { priority: 5 });
  const flaky = await queue.add('flaky', { n: 7 },
    { attempts: 3, backoff: { type: 'fixed', delay: 100 } });
  const doomed = await queue.add('doomed', {}, { attempts: 2, backoff: 50 });
  const first = await queue.add('square', { n: 300 }, { jobId: 'custom-id' });
  const dup = await queue.add('square', { n: 999 }, { jobId: 'custom-id' });
  eq('duplicate job id returns the same job', dup.id, first.id);
  eq('duplicate job keeps the first data', (await queue.getJob('custom-id')).data, { n: 300 });

  const counts0 = await queue.getJobCounts('waiting', 'delayed', 'prioritized');
  ok('jobs waiting before the worker starts', counts0.waiting + counts0.prioritized >= 20,
    JSON.stringify(counts0));
  eq('delayed count before the worker starts', counts0.delayed, 1);

  const expected = 20 + 1 + 2 + 1 + 1; // every job that should complete
  let processed = 0;
  let done;
  const allDone = new Promise((res) => { done = res; });
  const completedAt = {};
  const worker = new Worker(name, async (job) => {
    processed += 1;
    await job.updateProgress(50);
    await job.log(`processing ${job.name}`);
    if (job.name === 'flaky' && job.attemptsMade < 1) throw new Error('first attempt fails');
    if (job.name === 'doomed') throw new Error('always fails');
    await new Promise((r) => setTimeout(r, 5));
    return { square: job.data.n * job.data.n };
  }, { connection, concurrency: 4 });
  worker.on('error', (e) => fail(`worker error: ${e.message}`));
  let completed = 0, failedFinal = 0;
  worker.on('completed', (job) => {
    completed += 1;
    completedAt[job.id] = Date.now();
    if (completed === expected && failedFinal === 1) done();
  });
  worker.on('failed', (job) => {
    if (job && job.attemptsMade >= job.opts.attempts) failedFinal += 1;
    if (completed === expected && failedFinal === 1) done();
  });

  await withTimeout(allDone, 20000, `all jobs processed (completed ${completed}/${expected})`);

  // Results and states.
  for (const [i, j] of bulk.entries()) {
    const job = await queue.getJob(j.id);
    eq(`bulk job ${i} return value`, job.returnvalue, { square: i * i });
    eq(`bulk job ${i} state`, await job.getState(), 'completed');
    eq(`bulk job ${i} progress`, job.progress, 50);
  }
  const d = await queue.getJob(delayed.id);
  eq('delayed job result', d.returnvalue, { square: 10000 });
  ok('delayed job waited for its delay', completedAt[delayed.id] - t0 >= 350,
    `${completedAt[delayed.id] - t0} ms`);
  const f = await queue.getJob(flaky.id);
  eq('flaky job result', f.returnvalue, { square: 49 });
  eq('flaky job attempts', f.attemptsMade, 2);
  const x = await queue.getJob(doomed.id);
  eq('doomed job state', await x.getState(), 'failed');
  eq('doomed job failed reason', x.failedReason, 'always fails');
  eq('doomed job attempts', x.attemptsMade, 2);
  const logs = await queue.getJobLogs(bulk[0].id);
  eq('job logs', logs.logs, ['processing square']);

  const counts = await queue.getJobCounts('completed', 'failed', 'waiting', 'active', 'delayed',
    'prioritized', 'waiting-children');
  delete counts.paused; // reported alongside 'waiting' by some versions
  eq('final counts', counts, { completed: expected, failed: 1, waiting: 0, active: 0,
    delayed: 0, prioritized: 0, 'waiting-children': 0 });
  const completedJobs = await queue.getCompleted(0, -1);
  eq('getCompleted length', completedJobs.length, expected);

  // A parent/child flow: the parent runs after its children, seeing their results.
  const flow = new FlowProducer({ connection });
  const tree = await flow.add({
    name: 'sum', queueName: name, data: {},
    children: [1, 2, 3].map((n) => ({ name: 'square', queueName: name, data: { n } })),
  });
  await withTimeout(tree.job.waitUntilFinished(events, 10000), 12000, 'flow parent finished');
  // The parent's processor above squares nothing; check the children's values.
  const parent = await queue.getJob(tree.job.id);
  const childValues = Object.values(await parent.getChildrenValues())
    .map((v) => v.square).sort((a, b) => a - b);
  eq('flow children values', childValues, [1, 4, 9]);
  eq('flow parent state', await parent.getState(), 'completed');

  // Events reached QueueEvents (a stream read with XREAD BLOCK).
  await new Promise((r) => setTimeout(r, 300));
  ok('completed events seen', completedEvents.size >= expected,
    `${completedEvents.size} of ${expected}`);

  // Pause/resume and clean-up scripts.
  await queue.pause();
  ok('queue paused', await queue.isPaused());
  await queue.resume();
  ok('queue resumed', !(await queue.isPaused()));
  const cleaned = await queue.clean(0, 1000, 'completed');
  ok('clean removed completed jobs', cleaned.length >= expected, `${cleaned.length}`);

  await worker.close();
  await flow.close();
  await events.close();
  await queue.obliterate({ force: true });
  const left = await queue.client.then((c) => c.keys(`bull:${name}:*`));
  eq('keys left after obliterate', left, []);
  await queue.close();
  console.log(`all BullMQ checks passed (${processed} processor calls)`);
}

main().then(() => process.exit(0), (e) => {
  console.error(e && e.stack ? e.stack : e);
  console.error(`FAILED: ${e && e.message}`);
  process.exit(1);
});
