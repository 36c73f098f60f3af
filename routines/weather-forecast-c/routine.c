// A weather-forecast routine written in C: the proof that any compiled language can implement the
// `agora:routine/routine` world (routines/wit/routine.wit), not only the JavaScript engine.
//
// It answers protocols/weather-forecast.md without the LLM: it reads `location` and `date` from
// the request, calls the `weather_forecast` tool, and renames the tool's fields to the protocol's
// (`temperature_c` → `temperature`, `precipitation_mm` → `precipitation`, `condition` →
// `weatherCondition`).
//
// The canonical-ABI glue is written by hand (what wit-bindgen's C generator would emit): the
// export `handle(ptr, len) -> retptr` with `cabi_post_handle` and `cabi_realloc`, and the import
// `agora:routine/host@0.1.0` `call-tool`, whose result comes back through a return pointer.
// JSON is handled minimally: values are copied as raw JSON tokens, so escapes in strings and the
// spelling of numbers pass through unchanged, and nothing is parsed into C types.

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The canonical ABI's `result<string, string>` in memory: tag byte, then (ptr, len) at offset 4.
struct result_string {
    uint8_t is_err;
    uint8_t pad[3];
    char *ptr;
    size_t len;
};

_Static_assert(sizeof(struct result_string) == 12, "canonical ABI layout of result<string,string>");

static struct result_string handle_ret;

__attribute__((export_name("cabi_realloc"))) void *cabi_realloc(void *old, size_t old_size,
                                                                size_t align, size_t new_size) {
    (void)old_size;
    if (new_size == 0) {
        free(old);
        return (void *)align;
    }
    void *p = realloc(old, new_size);
    if (p == NULL) {
        __builtin_trap();
    }
    return p;
}

__attribute__((import_module("agora:routine/host@0.1.0"), import_name("call-tool"))) extern void
host_call_tool(const char *name, size_t name_len, const char *args, size_t args_len,
               struct result_string *ret);

// A slice of a JSON text.
struct token {
    const char *ptr;
    size_t len;
};

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) {
        p++;
    }
    return p;
}

// The end of the JSON string starting at p (on its opening quote), just past the closing quote.
static const char *string_end(const char *p, const char *end) {
    for (p++; p < end; p++) {
        if (*p == '\\') {
            p++;
        } else if (*p == '"') {
            return p + 1;
        }
    }
    return NULL;
}

// The raw value of `"key": value` in a flat JSON object: a string token (with its quotes) or a
// scalar (number, true, false, null). Nested values are not needed by this routine. Returns false
// when the key is missing or its value is not such a token.
static bool find_value(const char *json, size_t len, const char *key, struct token *out) {
    const char *p = json, *end = json + len;
    size_t key_len = strlen(key);
    while ((p = memchr(p, '"', (size_t)(end - p))) != NULL) {
        const char *s_end = string_end(p, end);
        if (s_end == NULL) {
            return false;
        }
        bool is_key = (size_t)(s_end - p) == key_len + 2 && memcmp(p + 1, key, key_len) == 0;
        const char *v = skip_ws(s_end, end);
        if (v < end && *v == ':') {
            v = skip_ws(v + 1, end);
            if (is_key) {
                const char *v_end = v;
                if (v < end && *v == '"') {
                    v_end = string_end(v, end);
                } else {
                    while (v_end < end && !strchr(",}] \t\r\n", *v_end)) {
                        v_end++;
                    }
                }
                if (v_end == NULL || v_end == v || *v == '{' || *v == '[') {
                    return false;
                }
                out->ptr = v;
                out->len = (size_t)(v_end - v);
                return true;
            }
        }
        p = s_end;
    }
    return false;
}

static void set_result(bool is_err, char *text) {
    handle_ret.is_err = is_err;
    handle_ret.ptr = text;
    handle_ret.len = strlen(text);
}

// A malloc'ed printf; traps when out of memory (the host reports that as out-of-memory).
static char *format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *format(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *out = malloc((size_t)n + 1);
    if (out == NULL) {
        __builtin_trap();
    }
    va_start(ap, fmt);
    vsnprintf(out, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return out;
}

__attribute__((export_name("handle"))) struct result_string *handle(char *body, size_t body_len) {
    struct token location, date;
    bool ok = find_value(body, body_len, "location", &location) && *location.ptr == '"' &&
              find_value(body, body_len, "date", &date) && *date.ptr == '"';
    if (!ok) {
        // The protocol's answer to a bad request is an error object, not a routine failure.
        set_result(false, format("{\"error\":\"the request needs string fields location and date\"}"));
        if (body_len) {
            free(body);
        }
        return &handle_ret;
    }
    char *args = format("{\"location\":%.*s,\"date\":%.*s}", (int)location.len, location.ptr,
                        (int)date.len, date.ptr);
    free(body); // non-empty here; the canonical ABI hands ownership of arguments to the callee

    static const char tool[] = "weather_forecast";
    struct result_string forecast = {0};
    host_call_tool(tool, sizeof tool - 1, args, strlen(args), &forecast);
    free(args);
    const char *text = forecast.len ? forecast.ptr : "";

    if (forecast.is_err) {
        set_result(true, format("weather_forecast failed: %.*s", (int)forecast.len, text));
    } else {
        struct token temperature, precipitation, condition;
        if (find_value(text, forecast.len, "temperature_c", &temperature) &&
            find_value(text, forecast.len, "precipitation_mm", &precipitation) &&
            find_value(text, forecast.len, "condition", &condition)) {
            set_result(false,
                       format("{\"temperature\":%.*s,\"precipitation\":%.*s,\"weatherCondition\":%.*s}",
                              (int)temperature.len, temperature.ptr, (int)precipitation.len,
                              precipitation.ptr, (int)condition.len, condition.ptr));
        } else {
            set_result(true, format("weather_forecast returned an unexpected result: %.*s",
                                    (int)forecast.len, text));
        }
    }
    if (forecast.len) {
        free(forecast.ptr);
    }
    return &handle_ret;
}

__attribute__((export_name("cabi_post_handle"))) void cabi_post_handle(struct result_string *ret) {
    free(ret->ptr);
}
