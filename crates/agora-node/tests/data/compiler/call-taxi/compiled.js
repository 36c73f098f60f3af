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

// An id's shape: L for a letter, D for a digit.
function shape(value) {
  return String(value).replace(/\p{L}/gu, "L").replace(/[0-9]/g, "D");
}

function handle(body) {
  const request = JSON.parse(body);
  // Step 1: getAvailableTaxi, as in examples 1-15, 17-19.
  const r1 = need("getAvailableTaxi", { time: request.time });
  if (isEmpty(r1)) uncovered("step 1 (getAvailableTaxi) found nothing");
  if (!(shape(r1?.taxiId) === "LLLLDD")) uncovered("step 1 (getAvailableTaxi) gave r1.taxiId a shape no example's had");
  // Step 2: assignTaxi, as in examples 1-15, 17-19.
  const r2 = need("assignTaxi", { taxiId: r1.taxiId, address: request.address, time: request.time });
  if (isEmpty(r2)) uncovered("step 2 (assignTaxi) found nothing");
  // Step 3: todayWeather, as in examples 1-15, 18, 19.
  const r3 = need("todayWeather", { location: "London" });
  if (isEmpty(r3)) uncovered("step 3 (todayWeather) found nothing");
  if (!(r3?.weather === "sunny")) uncovered("step 3 (todayWeather) gave r3.weather a value no example had");
  // Step 4: trafficInfo, as in examples 2, 4-9, 12-14, 18, 19.
  const r4 = need("trafficInfo", { date: "2023-04-15", location: "London" });
  if (isEmpty(r4)) uncovered("step 4 (trafficInfo) found nothing");
  if (!(r4?.traffic === "light")) uncovered("step 4 (trafficInfo) gave r4.traffic a value no example had");
  // The reply, as in examples 1-15, 18, 19.
  return { status: r2.status, price: 30, error: "" };
}
