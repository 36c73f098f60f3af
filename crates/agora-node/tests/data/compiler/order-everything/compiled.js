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

function handle(body) {
  const request = JSON.parse(body);
  // Left out: a call to run_sql_query that failed in examples 1-18, 20 (so it changed nothing).
  // Step 2: requestDeliveryDriver, as in examples 1-18, 20.
  const r2 = need("requestDeliveryDriver", { address: request.deliveryAddress, restaurant: "Royal Oak" });
  if (isEmpty(r2)) uncovered("step 2 (requestDeliveryDriver) found nothing");
  if (r2?.status === "failure") {
    // Examples 1, 2, 4, 5, 11, 13, 14, 17: r2.status was "failure".
    // The reply, as in examples 1, 2, 4, 5, 11, 13, 14, 17.
    return { status: r2.status, error: "The request delivery driver failed. Please try again later." };
  } else if (r2?.status === "success") {
    // Examples 3, 6-10, 12, 15, 16, 18, 20: r2.status was "success".
    // The reply, as in examples 3, 6-10, 12, 15, 16, 18, 20.
    return { status: r2.status, error: "" };
  } else {
    uncovered("r2.status is a value no example had");
  }
}
