// Assertions shared by the job-queue scripts: print the mismatch and exit 1.
function fail(msg) {
  console.error(`MISMATCH: ${msg}`);
  process.exit(1);
}
function eq(what, got, want) {
  const g = JSON.stringify(got), w = JSON.stringify(want);
  if (g !== w) fail(`${what}: got ${g}, expected ${w}`);
}
function ok(what, cond, detail) {
  if (!cond) fail(detail ? `${what}: ${detail}` : what);
}

module.exports = { fail, eq, ok };
