// OSNAP for a weather agent (protocols/osnap-weather.md), without the LLM.
//
// capabilities_query → capabilities_response (the two capabilities the document defines, and
// the agent's description, URL and protocols from node_info); a get_weather request → response;
// a weather_forecast task_request → status_update "completed". The forecast is the
// weather_forecast tool's temperature_c, precipitation_mm and condition renamed. Anything else
// gets error_handling with the document's codes, in the document's order. A failing forecast
// tool throws, so the node falls back to its LLM.

const DATE = /^\d{4}-\d{2}-\d{2}$/;
const FORMAT = { location: "string", date: "string (YYYY-MM-DD)" };

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function nonEmpty(value) {
  return typeof value === "string" && value.trim() !== "";
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
  const incomingPayload = isObject(incoming) && isObject(incoming.payload) ? incoming.payload : {};
  if (typeof incomingPayload.request_id === "string") payload.request_id = incomingPayload.request_id;
  if (typeof incomingPayload.task_id === "string") payload.task_id = incomingPayload.task_id;
  payload.error_code = code;
  payload.error_description = description;
  return message(incoming, "error_handling", payload);
}

function capabilities(incoming) {
  const node = callTool("node_info", {});
  return {
    sender_agent_id: node.name,
    receiver_agent_id: incoming.sender_agent_id,
    message_type: "capabilities_response",
    payload: {
      agent_description: node.description,
      agent_url: node.url,
      information_capabilities: [
        { name: "get_weather", description: "Provides the weather forecast for a given location and date", request_format: FORMAT },
      ],
      task_capabilities: [
        { name: "weather_forecast", description: "Forecasts the weather at a location on a date", request_format: FORMAT, SLA: "1 second" },
      ],
      protocols: node.protocols.map((p) => ({ hash: p.hash, name: p.name, description: p.description })),
    },
    metadata: { timestamp: node.time },
  };
}

// The forecast for `data` (request_data or task_data), or an error message naming `field`.
function forecast(data, field) {
  if (!isObject(data)) {
    return { problem: field + " is required, an object with location and date" };
  }
  if (!nonEmpty(data.location)) {
    return { problem: field + ".location is required: a place name" };
  }
  if (typeof data.date !== "string" || !DATE.test(data.date)) {
    return { problem: field + ".date is required, formatted YYYY-MM-DD" };
  }
  const found = callTool("weather_forecast", { location: data.location, date: data.date });
  return {
    forecast: {
      temperature: found.temperature_c,
      precipitation: found.precipitation_mm,
      weatherCondition: found.condition,
    },
  };
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
  const type = incoming.message_type;
  if (type === "capabilities_query") {
    return capabilities(incoming);
  }
  if (type !== "request" && type !== "task_request") {
    return error(incoming, "1002", "this agent answers capabilities_query, request and task_request, not " + type);
  }
  const payload = incoming.payload;
  const idField = type === "request" ? "request_id" : "task_id";
  if (!isObject(payload) || !nonEmpty(payload[idField])) {
    return error(incoming, "1004", "payload." + idField + " is required");
  }
  if (type === "request") {
    if (payload.request_action !== "get_weather") {
      return error(incoming, "1003", "the only request_action is get_weather");
    }
    const result = forecast(payload.request_data, "request_data");
    if (result.problem) return error(incoming, "1004", result.problem);
    return message(incoming, "response", {
      request_id: payload.request_id,
      status: "success",
      response_data: result.forecast,
    });
  }
  if (payload.task_name !== "weather_forecast") {
    return error(incoming, "1003", "the only task_name is weather_forecast");
  }
  const result = forecast(payload.task_data, "task_data");
  if (result.problem) return error(incoming, "1004", result.problem);
  return message(incoming, "status_update", {
    task_id: payload.task_id,
    task_status: "completed",
    task_result: result.forecast,
  });
}
