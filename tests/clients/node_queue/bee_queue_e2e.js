#!/usr/bin/env node
// End-to-end check of cairn with bee-queue, a smaller Lua-script job queue.
// bee-queue uses pub/sub (SUBSCRIBE/PUBLISH), which cairn does not implement
// yet, for two features: job events across processes (getEvents/sendEvents)
// and waking up delayed jobs (activateDelayedJobs: it SUBSCRIBEs to
// <prefix>:earlierDelayed at start-up and PUBLISHes inside the MULTI that
// delays a job). Both are off unless BEE_PUBSUB=1 is set; then a delayed job
// is added too. Without pub/sub this covers the Lua scripts (addJob,
// checkStalledJobs...), BRPOPLPUSH on the waiting list and MULTI/EXEC.
//
// Usage: node bee_queue_e2e.js PORT   (module path from NODE_PATH)
'use strict';

const Queue = require('bee-queue');

const port = Number(process.argv[2] || 6379);
const pubsub = process.env.BEE_PUBSUB === '1';

const { fail, eq } = require('./check');

async function main() {
  const settings = {
    redis: { host: '127.0.0.1', port },
    prefix: `bq${process.pid}`,
    getEvents: pubsub,
    sendEvents: pubsub,
    activateDelayedJobs: pubsub,
    removeOnSuccess: false,
  };
  const queue = new Queue('e2e', settings);
  queue.on('error', (e) => fail(`queue error: ${e.message}`));
  await queue.ready();

  const n = 20;
  const jobs = [];
  for (let i = 0; i < n; i++) jobs.push(queue.createJob({ n: i }));
  const errors = await queue.saveAll(jobs);
  eq('saveAll errors', errors.size, 0);
  const delayed = pubsub
    ? await queue.createJob({ n: 100 }).delayUntil(Date.now() + 300).save() : null;
  const retried = await queue.createJob({ n: 7, flaky: true }).retries(2).save();
  const doomed = await queue.createJob({ doomed: true }).save();

  const results = {};
  const failures = [];
  let done;
  const all = new Promise((res) => { done = res; });
  // bee-queue reports 'failed' for every failed attempt, retried or not.
  const finished = () => Object.keys(results).length === n + (pubsub ? 2 : 1)
    && failures.includes(`${doomed.id}:always fails`);
  queue.on('succeeded', (job, result) => {
    results[job.id] = result;
    if (finished()) done();
  });
  queue.on('failed', (job, err) => {
    failures.push(`${job.id}:${err.message}`);
    if (finished()) done();
  });
  let flakyTries = 0;
  queue.process(4, async (job) => {
    if (job.data.doomed) throw new Error('always fails');
    if (job.data.flaky && flakyTries++ === 0) throw new Error('first attempt fails');
    return { square: job.data.n * job.data.n };
  });

  let timer;
  await Promise.race([all, new Promise((_, rej) => {
    timer = setTimeout(() => rej(new Error(`timed out: ${Object.keys(results).length} succeeded, failures ${failures}`)), 20000);
  })]);
  clearTimeout(timer);

  for (let i = 0; i < n; i++) eq(`job ${i} result`, results[jobs[i].id], { square: i * i });
  if (pubsub) eq('delayed job result', results[delayed.id], { square: 10000 });
  eq('retried job result', results[retried.id], { square: 49 });
  eq('failures', failures, [`${retried.id}:first attempt fails`, `${doomed.id}:always fails`]);
  const counts = await queue.checkHealth();
  eq('health', { waiting: counts.waiting, active: counts.active, succeeded: counts.succeeded,
    failed: counts.failed, delayed: counts.delayed },
  { waiting: 0, active: 0, succeeded: n + (pubsub ? 2 : 1), failed: 1, delayed: 0 });
  await queue.destroy();
  await queue.close(5000);
  console.log(`all bee-queue checks passed (pub/sub features ${pubsub ? 'on' : 'off'})`);
}

main().then(() => process.exit(0), (e) => {
  console.error(e && e.stack ? e.stack : e);
  console.error(`FAILED: ${e && e.message}`);
  process.exit(1);
});
