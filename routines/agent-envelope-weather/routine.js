// The agent message envelope for weather queries (protocols/agent-envelope-weather.md), without
// the LLM.
//
// A `query` or `request` with content {"task": "weather_forecast", "location", "date"} gets an
// `inform` with {"status": "ok", "temperature", "precipitation", "weatherCondition"} (the
// weather_forecast tool's temperature_c, precipitation_mm and condition). Anything else gets an
// `error` with the guide's codes, checked in the document's order. node_info, asked first, gives
// the reply's sender, time and id and the time the ttl is checked against. A failing forecast
// tool throws, so the node falls back to its LLM. Idempotency keys are the node's business: a
// repeat never reaches the routine.

const DATE = /^\d{4}-\d{2}-\d{2}$/;
const UUID = /^[a-f0-9-]{36}$/;
const REQUIRED = ["message_id", "conversation_id", "sender", "receiver", "timestamp", "performative", "schema_version"];

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function optionalString(value) {
  return typeof value === "string" ? value : null;
}

function envelope(node, incoming, performative, content) {
  const message = isObject(incoming) ? incoming : {};
  return {
    message_id: node.fresh_id,
    conversation_id: optionalString(message.conversation_id),
    sender: node.name,
    receiver: optionalString(message.sender),
    timestamp: node.time,
    performative: performative,
    in_reply_to: optionalString(message.message_id),
    schema_version: "1.0.0",
    content: content,
  };
}

function error(node, incoming, code, message) {
  return envelope(node, incoming, "error", { code: code, message: message });
}

function handle(text) {
  const node = callTool("node_info", {});
  let message;
  try {
    message = JSON.parse(text);
  } catch (e) {
    return error(node, null, "error.semantic.invalid_message", "the message is not valid JSON");
  }
  if (!isObject(message)) {
    return error(node, null, "error.semantic.invalid_message", "the message must be a JSON object");
  }
  for (const field of REQUIRED) {
    if (typeof message[field] !== "string") {
      return error(node, message, "error.semantic.invalid_message", field + " is required, a string");
    }
  }
  if (!isObject(message.content)) {
    return error(node, message, "error.semantic.invalid_message", "content is required, an object");
  }
  if (!UUID.test(message.message_id)) {
    return error(node, message, "error.semantic.invalid_message", "message_id must be a lowercase UUID");
  }
  const sent = Date.parse(message.timestamp);
  if (Number.isNaN(sent)) {
    return error(node, message, "error.semantic.invalid_message", "timestamp must be an ISO 8601 date");
  }
  const ttl = message.ttl;
  if (ttl !== undefined && !(Number.isInteger(ttl) && ttl >= 1)) {
    return error(node, message, "error.semantic.invalid_message", "ttl must be an integer of at least 1");
  }
  if (!message.schema_version.startsWith("1.")) {
    return error(node, message, "error.semantic.unsupported_schema_version", "this agent speaks schema 1.x");
  }
  if (message.performative !== "query" && message.performative !== "request") {
    return error(node, message, "error.semantic.invalid_transition",
      "this agent accepts query or request, not " + message.performative);
  }
  if (ttl !== undefined && Date.parse(node.time) - sent > ttl * 1000) {
    return error(node, message, "error.timeout", "the message's ttl ran out before it was answered");
  }
  const { task, location, date } = message.content;
  if (task !== "weather_forecast") {
    return error(node, message, "error.semantic.unknown_task", "the only task is weather_forecast");
  }
  if (typeof location !== "string" || location.trim() === "") {
    return error(node, message, "error.semantic.invalid_content", "content.location is required: a place name");
  }
  if (typeof date !== "string" || !DATE.test(date)) {
    return error(node, message, "error.semantic.invalid_content", "content.date is required, formatted YYYY-MM-DD");
  }
  const forecast = callTool("weather_forecast", { location, date });
  return envelope(node, message, "inform", {
    status: "ok",
    temperature: forecast.temperature_c,
    precipitation: forecast.precipitation_mm,
    weatherCondition: forecast.condition,
  });
}
