// Compiled by the node, with no LLM, from 20 examples of its LLM's answers to this protocol
// (numbered as in the examination report): each step says which examples it came from. A
// request unlike all of them is left to the LLM, and becomes an example too.

// No example covers this request: the node answers it with its LLM instead.
function uncovered(what) {
  throw new Error("uncovered: " + what);
}

// A call that succeeded in every example; a failure is not covered.
function need(tool, args) {
  try {
    return callTool(tool, args);
  } catch (error) {
    uncovered(tool + " failed, which it did in no example: " + (error && error.message));
  }
}

// A call that failed in some examples: its result, or that it failed.
function attempt(tool, args) {
  try {
    return { failed: false, result: callTool(tool, args) };
  } catch (error) {
    return { failed: true, error: String(error && error.message) };
  }
}

function isEmpty(value) {
  return value === null || value === undefined || value === "" ||
    (Array.isArray(value) ? value.length === 0 : typeof value === "object" && Object.keys(value).length === 0);
}

// An id's shape: L for a letter, D for a digit.
function shape(value) {
  return String(value).replace(/\p{L}/gu, "L").replace(/[0-9]/g, "D");
}

function handle(body) {
  const request = JSON.parse(body);
  // Step 1: run_sql_query, as in examples 1-20.
  const r1 = need("run_sql_query", { query: `SELECT SkiId FROM Skis WHERE SkiType = '${request.type}' LIMIT 1` });
  if (isEmpty(r1)) uncovered("step 1 (run_sql_query) found nothing");
  if (!(shape(r1?.[0]?.SkiId) === "LDDD")) uncovered("step 1 (run_sql_query) gave r1[0].SkiId a shape no example's had");
  // Step 2: run_sql_query, as in examples 2, 3, 5-8, 11, 14, 17, 18.
  const a2 = attempt("run_sql_query", { query: `INSERT INTO SkiRentals (SkiId, StartDate) VALUES ('${r1[0].SkiId}', '${request.date}')` });
  if (a2.failed) {
    // Step 3: run_sql_query, as in examples 8, 11, 17.
    const r3 = need("run_sql_query", { query: `SELECT SkiId FROM Skis WHERE SkiType = '${request.type}' LIMIT 1` });
    if (isEmpty(r3)) uncovered("step 3 (run_sql_query) found nothing");
    if (!(shape(r3?.[0]?.SkiId) === "LDDD")) uncovered("step 3 (run_sql_query) gave r3[0].SkiId a shape no example's had");
    // The reply, as in examples 8, 11, 17.
    return { status: "failure", message: `Failed to rent the ski ${r3[0].SkiId} on ${request.date}. The ski is already rented for that date.` };
  }
  const r2 = a2.result;
  if (isEmpty(r2)) uncovered("step 2 (run_sql_query) found nothing");
  if (!(r2?.[0]?.changes === 1)) uncovered("step 2 (run_sql_query) gave r2[0].changes a value no example had");
  // Step 3: run_sql_query, as in examples 1-3, 5-7, 9, 12, 14, 18.
  const r3 = need("run_sql_query", { query: `SELECT SkiId FROM Skis WHERE SkiType = '${request.type}' LIMIT 1` });
  if (isEmpty(r3)) uncovered("step 3 (run_sql_query) found nothing");
  if (!(shape(r3?.[0]?.SkiId) === "LDDD")) uncovered("step 3 (run_sql_query) gave r3[0].SkiId a shape no example's had");
  // The reply, as in examples 2, 3, 5-7, 12, 14, 18.
  return { status: "success", message: `Ski ${r3[0].SkiId} has been rented for ${request.date}.` };
}
