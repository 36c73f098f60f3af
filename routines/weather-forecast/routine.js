// The weather-forecast protocol (protocols/weather-forecast.md), answered without the LLM.
//
// The request is `{"location": ..., "date": "YYYY-MM-DD"}`; the reply renames the
// weather_forecast tool's fields to the protocol's: temperature_c → temperature,
// precipitation_mm → precipitation, condition → weatherCondition. Bad input gets
// `{"error": ...}`, as the protocol asks. A failing tool throws, so the node falls back to its LLM.

const DATE = /^\d{4}-\d{2}-\d{2}$/;

function handle(body) {
  let request;
  try {
    request = JSON.parse(body);
  } catch (e) {
    return { error: "the request is not valid JSON" };
  }
  if (request === null || typeof request !== "object" || Array.isArray(request)) {
    return { error: "the request must be a JSON object" };
  }
  const { location, date } = request;
  if (typeof location !== "string" || location.trim() === "") {
    return { error: "location is required: a place name" };
  }
  if (typeof date !== "string" || !DATE.test(date)) {
    return { error: "date is required, formatted YYYY-MM-DD" };
  }
  const forecast = callTool("weather_forecast", { location, date });
  return {
    temperature: forecast.temperature_c,
    precipitation: forecast.precipitation_mm,
    weatherCondition: forecast.condition,
  };
}
