// The agent message DSL for weather queries (protocols/agent-dsl-weather.md), without the LLM.
//
// A QUERY whose body is the JSON text of {"location", "date"} gets a RESPONSE whose body is the
// JSON text of {"temperature", "precipitation", "weatherCondition"} (the weather_forecast tool's
// temperature_c, precipitation_mm and condition). Anything else gets an ERROR message with the
// document's codes, checked in the document's order. node_info supplies the reply's sender, time
// and id. A failing tool throws, so the node falls back to its LLM.

const DATE = /^\d{4}-\d{2}-\d{2}$/;
const HEADER_FIELDS = ["version", "sender", "receiver", "type", "id", "timestamp", "content_type"];

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function optionalString(value) {
  return typeof value === "string" ? value : null;
}

// A reply message to `incoming` (whatever could be read of it) of `type` with `body` (an object).
function reply(incoming, type, body) {
  const header = isObject(incoming) && isObject(incoming.header) ? incoming.header : {};
  const node = callTool("node_info", {});
  return {
    header: {
      version: "1.0",
      sender: node.name,
      receiver: optionalString(header.sender),
      type: type,
      id: node.fresh_id,
      timestamp: node.time,
      content_type: "application/json",
      reply_to: optionalString(header.id),
      conversation_id: optionalString(header.conversation_id),
    },
    body: JSON.stringify(body),
  };
}

function error(incoming, code, message) {
  return reply(incoming, "ERROR", { error: code, message: message });
}

function handle(text) {
  let message;
  try {
    message = JSON.parse(text);
  } catch (e) {
    return error(null, "invalid_message", "the message is not valid JSON");
  }
  if (!isObject(message) || !isObject(message.header) || !("body" in message)) {
    return error(message, "invalid_message", "a message is an object with a header and a body");
  }
  const header = message.header;
  for (const field of HEADER_FIELDS) {
    if (typeof header[field] !== "string") {
      return error(message, "invalid_message", "header." + field + " is required, a string");
    }
  }
  if (header.id === "") {
    return error(message, "invalid_message", "header.id must not be empty");
  }
  if (typeof message.body !== "string") {
    return error(message, "invalid_message", "body must be a string holding JSON text");
  }
  if (header.version !== "1.0") {
    return error(message, "unsupported_version", "this agent speaks version 1.0");
  }
  if (header.type !== "QUERY") {
    return error(message, "unsupported_type", "this agent answers QUERY messages only");
  }
  if (header.content_type !== "application/json") {
    return error(message, "unsupported_content_type", "the body must be application/json");
  }
  let query;
  try {
    query = JSON.parse(message.body);
  } catch (e) {
    return error(message, "invalid_body", "the body is not JSON text");
  }
  if (!isObject(query)) {
    return error(message, "invalid_body", "the body must be a JSON object");
  }
  const { location, date } = query;
  if (typeof location !== "string" || location.trim() === "") {
    return error(message, "invalid_body", "location is required: a place name");
  }
  if (typeof date !== "string" || !DATE.test(date)) {
    return error(message, "invalid_body", "date is required, formatted YYYY-MM-DD");
  }
  const forecast = callTool("weather_forecast", { location, date });
  return reply(message, "RESPONSE", {
    temperature: forecast.temperature_c,
    precipitation: forecast.precipitation_mm,
    weatherCondition: forecast.condition,
  });
}
