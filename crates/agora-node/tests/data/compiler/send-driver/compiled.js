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

function isEmpty(value) {
  return value === null || value === undefined || value === "" ||
    (Array.isArray(value) ? value.length === 0 : typeof value === "object" && Object.keys(value).length === 0);
}

function part(text, separator, index) {
  return String(text).split(separator)[index];
}

function handle(body) {
  const request = JSON.parse(body);
  // Step 1: trafficInfo, as in examples 1-3, 5, 9, 13, 14, 16.
  const r1 = need("trafficInfo", { date: part(request.address, ",", 0), location: part(request.address, ",", 1) });
  if (isEmpty(r1)) uncovered("step 1 (trafficInfo) found nothing");
  if (r1?.traffic === "moderate" || r1?.traffic === "clear") {
    // Examples 1-5, 7, 9, 13-18: r1.traffic was "moderate" or "clear".
    // Step 2: sendDriver, as in examples 1-5, 7, 9, 13-18.
    const r2 = need("sendDriver", { restaurant: request.restaurant, address: request.address });
    if (isEmpty(r2)) uncovered("step 2 (sendDriver) found nothing");
    // The reply, as in examples 1-5, 7, 9, 13-18.
    return { status: r2.status };
  } else if (r1?.traffic === "accident" || r1?.traffic === "heavy") {
    // Examples 6, 8, 10-12, 19, 20: r1.traffic was "accident" or "heavy".
    // The reply, as in examples 6, 8, 10-12, 19, 20.
    return { status: "failure", error: "Traffic is heavy or there is an accident at the specified location." };
  } else {
    uncovered("r1.traffic is a value no example had");
  }
}
