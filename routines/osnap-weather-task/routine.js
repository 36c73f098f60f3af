// OSNAP tasks carrying the weather forecast protocol (protocols/osnap-weather-task.md), without
// the LLM.
//
// A weather_forecast task_request's task_data is a request of the referenced weather forecast
// protocol (WEATHER, its hash, as the document's front matter names it): it goes to that
// protocol's routine on this node through call_protocol, and the reply comes back as the
// status_update's task_result; the weather protocol's error reply becomes error_handling 1004.
// Other problems get error_handling with the document's codes, in its order. A failing call
// (no weather routine here, or it failed) throws, so the node falls back to its LLM.

const WEATHER = "f771772db62fec0a918708ad37dc5b38df6d0f93";

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function message(incoming, type, payload) {
  const node = callTool("node_info", {});
  const sender = isObject(incoming) && typeof incoming.sender_agent_id === "string" ? incoming.sender_agent_id : null;
  return {
    sender_agent_id: node.name,
    receiver_agent_id: sender,
    message_type: type,
    payload: payload,
    metadata: { timestamp: node.time },
  };
}

function error(incoming, code, description) {
  const payload = {};
  if (isObject(incoming) && isObject(incoming.payload) && typeof incoming.payload.task_id === "string") {
    payload.task_id = incoming.payload.task_id;
  }
  payload.error_code = code;
  payload.error_description = description;
  return message(incoming, "error_handling", payload);
}

function handle(text) {
  let incoming;
  try {
    incoming = JSON.parse(text);
  } catch (e) {
    return error(null, "1000", "the message is not valid JSON");
  }
  if (!isObject(incoming) || typeof incoming.sender_agent_id !== "string" || typeof incoming.message_type !== "string") {
    return error(incoming, "1000", "a message is an object with sender_agent_id and message_type");
  }
  if (incoming.message_type !== "task_request") {
    return error(incoming, "1002", "this agent answers task_request, not " + incoming.message_type);
  }
  const payload = incoming.payload;
  if (!isObject(payload) || typeof payload.task_id !== "string" || payload.task_id.trim() === "" || !isObject(payload.task_data)) {
    return error(incoming, "1004", "payload needs a task_id and a task_data object");
  }
  if (payload.task_name !== "weather_forecast") {
    return error(incoming, "1003", "the only task_name is weather_forecast");
  }
  const reply = callTool("call_protocol", { protocol: WEATHER, body: payload.task_data });
  if (isObject(reply) && typeof reply.error === "string") {
    return error(incoming, "1004", reply.error);
  }
  return message(incoming, "status_update", {
    task_id: payload.task_id,
    task_status: "completed",
    task_result: reply,
  });
}
