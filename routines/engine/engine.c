// The JavaScript engine of agora routines: QuickJS-NG behind the `agora:routine/routine` world.
//
// Why it looks like this:
// - The engine is built once (build.sh) and is the same for every JavaScript routine. A routine is
//   made by running `wizer-initialize` with the routine's source on WASI stdin and snapshotting
//   the memory (agora-routines does this in-process). The snapshot holds the QuickJS runtime, the
//   context and the evaluated top level, so a request only pays for `handle`, not for start-up.
// - The component ABI is written by hand (what wit-bindgen's C generator would emit for
//   routines/wit/routine.wit): `handle(ptr, len) -> retptr`, `cabi_post_handle`, `cabi_realloc`,
//   and the import `agora:routine/host@0.1.0` `call-tool` with a return pointer.
// - Only the QuickJS core is linked, not quickjs-libc: routines have no `std`/`os` modules, no
//   files, no network. The few WASI calls left (stdio, clock) are served by an empty context.
// - Errors are text: `String(exception)` plus the stack (`routine.js:LINE:COL`) for Error objects.
// - QuickJS has no stack-depth check on WASI, so runaway recursion ends in a trap: wasmtime's
//   native stack limit, or the C stack (linked first in memory) running below address 0. Either
//   way it is contained and reported as a trap, never a heap overwrite.

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quickjs.h"

#define FILENAME "routine.js"

static JSRuntime *rt;
static JSContext *ctx;

// The canonical ABI's `result<string, string>` in memory: tag byte, then (ptr, len) at offset 4.
struct result_string {
    uint8_t is_err;
    uint8_t pad[3];
    char *ptr;
    size_t len;
};

_Static_assert(sizeof(struct result_string) == 12, "canonical ABI layout of result<string,string>");

static struct result_string handle_ret;

// ---------------------------------------------------------------------------------------------
// Memory shared with the host.

// Every buffer gets one spare byte so strings received from the host can be NUL-terminated in
// place (JS_ParseJSON and JS_Eval want a terminator).
__attribute__((export_name("cabi_realloc"))) void *cabi_realloc(void *old, size_t old_size,
                                                                size_t align, size_t new_size) {
    (void)old_size;
    if (new_size == 0) {
        free(old);
        return (void *)align;
    }
    void *p = realloc(old, new_size + 1);
    if (p == NULL) {
        abort();
    }
    return p;
}

__attribute__((import_module("agora:routine/host@0.1.0"), import_name("call-tool"))) extern void
host_call_tool(const char *name, size_t name_len, const char *args, size_t args_len,
               struct result_string *ret);

// ---------------------------------------------------------------------------------------------
// Helpers on JS values.

// A malloc'ed copy of `s`, or NULL when out of memory.
static char *dup_bytes(const char *s, size_t len, size_t *out_len) {
    char *p = malloc(len + 1);
    if (p != NULL) {
        memcpy(p, s, len);
        p[len] = 0;
        *out_len = len;
    }
    return p;
}

// The text of a thrown value: `String(value)`, then the stack when it is an Error that has one.
// Returns a malloc'ed string; never NULL (falls back to a static message copy).
static char *exception_text(JSValueConst exc, size_t *out_len) {
    static const char fallback[] = "exception (could not be converted to text)";
    size_t msg_len = 0, stack_len = 0;
    const char *msg = JS_ToCStringLen(ctx, &msg_len, exc);
    const char *stack = NULL;
    if (JS_IsError(exc)) {
        JSValue s = JS_GetPropertyStr(ctx, exc, "stack");
        if (JS_IsString(s)) {
            stack = JS_ToCStringLen(ctx, &stack_len, s);
        }
        JS_FreeValue(ctx, s);
    }
    char *out;
    if (msg == NULL) {
        JS_FreeValue(ctx, JS_GetException(ctx)); // the conversion itself threw
        out = dup_bytes(fallback, sizeof fallback - 1, out_len);
    } else {
        size_t total = msg_len + (stack_len ? 1 + stack_len : 0);
        out = malloc(total + 1);
        if (out != NULL) {
            memcpy(out, msg, msg_len);
            if (stack_len) {
                out[msg_len] = '\n';
                memcpy(out + msg_len + 1, stack, stack_len);
            }
            // Stacks end with a newline; the message should not.
            while (total > 0 && out[total - 1] == '\n') {
                total--;
            }
            out[total] = 0;
            *out_len = total;
        }
    }
    if (msg != NULL) {
        JS_FreeCString(ctx, msg);
    }
    if (stack != NULL) {
        JS_FreeCString(ctx, stack);
    }
    if (out == NULL) {
        abort(); // no memory even for the error text: trap rather than lie
    }
    return out;
}

// Takes the pending exception and returns its text (malloc'ed).
static char *take_exception(size_t *out_len) {
    JSValue exc = JS_GetException(ctx);
    char *text = exception_text(exc, out_len);
    JS_FreeValue(ctx, exc);
    return text;
}

// Runs queued jobs (promise reactions) until none is left. Returns false when a job threw; the
// exception is then pending.
static bool run_jobs(void) {
    JSContext *job_ctx;
    for (;;) {
        int r = JS_ExecutePendingJob(rt, &job_ctx);
        if (r == 0) {
            return true;
        }
        if (r < 0) {
            return false;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The global `callTool(name, args)`.

// The replacer of callTool's JSON.stringify: an array element that is `undefined` is sent as the
// string "\u0000undefined" rather than as `null`, which would hide it. It is what a program gets
// when it reads a value that is not there (`[data.roomNumber, start]` where the data has no
// roomNumber), and as `null` it became a SQL NULL that was written (bookings of room NULL, seen
// in recorded natural-language programs). The runtime refuses such a call before any tool runs
// (agora-routines, `arguments.rs`). An undefined object member is left alone: JSON drops it, and
// a tool that needs it says so.
static JSValue js_mark_undefined(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
    if (argc < 2) {
        return JS_UNDEFINED;
    }
    if (JS_IsUndefined(argv[1]) && JS_IsArray(this_val)) {
        return JS_NewStringLen(c, "\0undefined", 10);
    }
    return JS_DupValue(c, argv[1]);
}

// js_mark_undefined as a function value, made once in wizer_initialize (so it is in the snapshot)
// and kept for the context's life.
static JSValue mark_undefined;

// args: a JSON string is passed through, anything else is JSON.stringify'd (undefined → `{}`), an
// undefined array element in it marked (js_mark_undefined).
// Returns the parsed JSON result, or the raw string when it is not JSON; a tool error is thrown
// as an Error whose message is the tool's text.
static JSValue js_call_tool(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
    (void)this_val;
    if (argc < 1 || !JS_IsString(argv[0])) {
        return JS_ThrowTypeError(c, "callTool(name, args): name must be a string");
    }
    size_t name_len, args_len;
    const char *name = JS_ToCStringLen(c, &name_len, argv[0]);
    if (name == NULL) {
        return JS_EXCEPTION;
    }
    JSValue args_val;
    if (argc < 2 || JS_IsUndefined(argv[1])) {
        args_val = JS_NewString(c, "{}");
    } else if (JS_IsString(argv[1])) {
        args_val = JS_DupValue(c, argv[1]);
    } else {
        args_val = JS_JSONStringify(c, argv[1], mark_undefined, JS_UNDEFINED);
    }
    if (JS_IsException(args_val)) {
        JS_FreeCString(c, name);
        return JS_EXCEPTION;
    }
    if (!JS_IsString(args_val)) { // e.g. JSON.stringify of a function
        JS_FreeValue(c, args_val);
        JS_FreeCString(c, name);
        return JS_ThrowTypeError(c, "callTool(name, args): args cannot be converted to JSON");
    }
    const char *args = JS_ToCStringLen(c, &args_len, args_val);
    JS_FreeValue(c, args_val);
    if (args == NULL) {
        JS_FreeCString(c, name);
        return JS_EXCEPTION;
    }

    struct result_string ret = {0};
    host_call_tool(name, name_len, args, args_len, &ret);
    JS_FreeCString(c, name);
    JS_FreeCString(c, args);

    // The host allocated ret.ptr through cabi_realloc, with the spare byte for a terminator.
    char *text = ret.len ? ret.ptr : "";
    if (ret.len) {
        text[ret.len] = 0;
    }
    JSValue out;
    if (ret.is_err) {
        JSValue global = JS_GetGlobalObject(c);
        JSValue ctor = JS_GetPropertyStr(c, global, "Error");
        JS_FreeValue(c, global);
        JSValue msg = JS_NewStringLen(c, text, ret.len);
        JSValue err = JS_CallConstructor(c, ctor, 1, (JSValueConst *)&msg);
        JS_FreeValue(c, msg);
        JS_FreeValue(c, ctor);
        out = JS_IsException(err) ? err : JS_Throw(c, err);
    } else {
        out = JS_ParseJSON(c, text, ret.len, "<tool result>");
        if (JS_IsException(out)) {
            JS_FreeValue(c, JS_GetException(c));
            out = JS_NewStringLen(c, text, ret.len);
        }
    }
    if (ret.len) {
        free(ret.ptr);
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// The global `console`: routines written for browsers or Node call console.log. Without it they
// would fail with a ReferenceError. Output goes to stderr: shown in build errors when the top
// level fails, discarded at run time (the run-time WASI context has no stderr).

static void write_all(int fd, const char *s, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, s, len);
        if (n <= 0) {
            return;
        }
        s += n;
        len -= (size_t)n;
    }
}

static JSValue js_console_log(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
    (void)this_val;
    for (int i = 0; i < argc; i++) {
        // Objects as JSON (as a developer expects from console.log), the rest as String(value).
        JSValue shown = JS_UNDEFINED;
        if (JS_IsObject(argv[i]) && !JS_IsFunction(c, argv[i]) && !JS_IsError(argv[i])) {
            shown = JS_JSONStringify(c, argv[i], JS_UNDEFINED, JS_UNDEFINED);
            if (JS_IsException(shown)) {
                JS_FreeValue(c, JS_GetException(c)); // e.g. a cycle: fall back to String()
                shown = JS_UNDEFINED;
            }
        }
        size_t len;
        const char *text = JS_ToCStringLen(c, &len, JS_IsString(shown) ? shown : argv[i]);
        JS_FreeValue(c, shown);
        if (text == NULL) {
            return JS_EXCEPTION;
        }
        if (i > 0) {
            write_all(2, " ", 1);
        }
        write_all(2, text, len);
        JS_FreeCString(c, text);
    }
    write_all(2, "\n", 1);
    return JS_UNDEFINED;
}

static void add_console(JSValueConst global) {
    static const char *const methods[] = {"log", "info", "warn", "error", "debug"};
    JSValue console = JS_NewObject(ctx);
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        JS_SetPropertyStr(ctx, console, methods[i],
                          JS_NewCFunction(ctx, js_console_log, methods[i], 1));
    }
    JS_SetPropertyStr(ctx, global, "console", console);
}

// ---------------------------------------------------------------------------------------------
// `Math.random`, seeded per request. QuickJS seeds its generator when the context is created,
// which happens before the snapshot, so every request would see the same "random" sequence.
// This one seeds itself from WASI randomness on first use in each request (`handle` clears the
// flag; the snapshot is taken with it clear).

static bool random_seeded;
static uint64_t random_state;

static JSValue js_math_random(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
    (void)this_val;
    (void)argc;
    (void)argv;
    if (!random_seeded) {
        if (getentropy(&random_state, sizeof random_state) != 0 || random_state == 0) {
            random_state = 0x9e3779b97f4a7c15u; // xorshift needs a non-zero state
        }
        random_seeded = true;
    }
    // xorshift64*: plenty for Math.random, which promises no cryptographic quality.
    random_state ^= random_state >> 12;
    random_state ^= random_state << 25;
    random_state ^= random_state >> 27;
    uint64_t bits = random_state * 0x2545f4914f6cdd1du;
    return JS_NewFloat64(c, (double)(bits >> 11) * 0x1.0p-53);
}

static void replace_math_random(JSValueConst global) {
    JSValue math = JS_GetPropertyStr(ctx, global, "Math");
    JS_SetPropertyStr(ctx, math, "random", JS_NewCFunction(ctx, js_math_random, "random", 0));
    JS_FreeValue(ctx, math);
}

// ---------------------------------------------------------------------------------------------
// Pre-initialization (run by the builder, then snapshotted).

static void fail_init(const char *text, size_t len) {
    write_all(2, text, len);
    write_all(2, "\n", 1);
    abort();
}

static void fail_init_exception(void) {
    size_t len;
    char *text = take_exception(&len);
    fail_init(text, len);
}

// The routine's source, read whole from stdin and NUL-terminated.
static char *read_source(size_t *out_len) {
    size_t cap = 64 * 1024, len = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (buf == NULL) {
            static const char msg[] = "out of memory reading the routine source";
            fail_init(msg, sizeof msg - 1);
        }
        ssize_t n = read(0, buf + len, cap - len);
        if (n < 0) {
            static const char msg[] = "cannot read the routine source from stdin";
            fail_init(msg, sizeof msg - 1);
        }
        if (n == 0) {
            break;
        }
        len += (size_t)n;
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
    }
    buf[len] = 0;
    *out_len = len;
    return buf;
}

__attribute__((export_name("wizer-initialize"))) void wizer_initialize(void) {
    size_t src_len;
    char *src = read_source(&src_len);

    rt = JS_NewRuntime();
    if (rt == NULL) {
        static const char msg[] = "cannot create the JavaScript runtime";
        fail_init(msg, sizeof msg - 1);
    }
    ctx = JS_NewContext(rt);
    if (ctx == NULL) {
        static const char msg[] = "cannot create the JavaScript context";
        fail_init(msg, sizeof msg - 1);
    }

    mark_undefined = JS_NewCFunction(ctx, js_mark_undefined, "markUndefined", 2);
    JSValue global = JS_GetGlobalObject(ctx);
    JS_SetPropertyStr(ctx, global, "callTool", JS_NewCFunction(ctx, js_call_tool, "callTool", 2));
    add_console(global);
    replace_math_random(global);

    JSValue result = JS_Eval(ctx, src, src_len, FILENAME, JS_EVAL_TYPE_GLOBAL);
    free(src);
    if (JS_IsException(result)) {
        fail_init_exception();
    }
    JS_FreeValue(ctx, result);
    if (!run_jobs()) {
        fail_init_exception();
    }

    JSValue handle = JS_GetPropertyStr(ctx, global, "handle");
    if (!JS_IsFunction(ctx, handle)) {
        static const char msg[] = "routine.js does not define a function `handle(body)`";
        fail_init(msg, sizeof msg - 1);
    }
    JS_FreeValue(ctx, handle);
    JS_FreeValue(ctx, global);
    random_seeded = false; // top-level code may have drawn numbers: requests must not repeat them
    // Collect the garbage of the top level now so it is not part of every instance's snapshot.
    JS_RunGC(rt);
}

// ---------------------------------------------------------------------------------------------
// The export `handle(body) -> result<string, string>`.

// Settles `value` when it is a promise (running queued jobs); returns a new reference or
// JS_EXCEPTION with the exception pending.
static JSValue settle(JSValue value) {
    if (!run_jobs()) {
        JS_FreeValue(ctx, value);
        return JS_EXCEPTION;
    }
    if (!JS_IsPromise(value)) {
        return value;
    }
    JSPromiseStateEnum state = JS_PromiseState(ctx, value);
    JSValue result = JS_PromiseResult(ctx, value);
    JS_FreeValue(ctx, value);
    if (state == JS_PROMISE_FULFILLED) {
        return result;
    }
    if (state == JS_PROMISE_REJECTED) {
        return JS_Throw(ctx, result);
    }
    JS_FreeValue(ctx, result);
    return JS_ThrowTypeError(ctx, "handle(body) returned a promise that never settled");
}

__attribute__((export_name("handle"))) struct result_string *handle(char *body, size_t body_len) {
    random_seeded = false; // a fresh instance per request in practice; this makes it certain
    JSValue arg = JS_NewStringLen(ctx, body_len ? body : "", body_len);
    if (body_len) {
        free(body); // the canonical ABI hands ownership of arguments to the callee
    }
    JSValue global = JS_GetGlobalObject(ctx);
    JSValue fn = JS_GetPropertyStr(ctx, global, "handle");
    JSValue result = JS_IsException(arg) ? JS_EXCEPTION : JS_Call(ctx, fn, global, 1, &arg);
    JS_FreeValue(ctx, fn);
    JS_FreeValue(ctx, arg);
    JS_FreeValue(ctx, global);

    if (!JS_IsException(result)) {
        result = settle(result);
    }
    if (!JS_IsException(result) && !JS_IsString(result)) {
        JSValue json = JS_JSONStringify(ctx, result, JS_UNDEFINED, JS_UNDEFINED);
        JS_FreeValue(ctx, result);
        if (!JS_IsException(json) && !JS_IsString(json)) {
            JS_FreeValue(ctx, json);
            json = JS_ThrowTypeError(ctx, "handle(body) must return a string or a JSON value");
        }
        result = json;
    }

    size_t len;
    if (JS_IsException(result)) {
        handle_ret.is_err = 1;
        handle_ret.ptr = take_exception(&len);
    } else {
        const char *s = JS_ToCStringLen(ctx, &len, result);
        handle_ret.is_err = s == NULL;
        handle_ret.ptr = s == NULL ? take_exception(&len) : dup_bytes(s, len, &len);
        if (s != NULL) {
            JS_FreeCString(ctx, s);
        }
        if (handle_ret.ptr == NULL) {
            abort();
        }
    }
    JS_FreeValue(ctx, result);
    handle_ret.len = len;
    return &handle_ret;
}

__attribute__((export_name("cabi_post_handle"))) void cabi_post_handle(struct result_string *ret) {
    free(ret->ptr);
}
