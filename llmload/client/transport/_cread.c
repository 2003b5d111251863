/* _cread: the client's per-read work in C, twin of llmload/client/transport/pyread.py.
 *
 * One job: turn the bytes a stream socket delivers into timestamped lines and, for the OpenAI wire, into the
 * few fields a request's record needs. Three pieces, each with the same interface as its Python twin
 * (docs/design.md, "The compiled reader"):
 *
 *   Decoder         one HTTP/1.1 response: finds the end of the head (Python parses it), undoes chunked,
 *                   Content-Length or until-close framing, splits lines, stamps each with the read that
 *                   completed it.
 *   ReadLoop        one wake-up of the reactor: every ready socket of an epoll set read with recvmsg and its
 *                   kernel receive time (SO_TIMESTAMPNS), fed to its Decoder; reports only what Python must
 *                   act on (a head, an end, an error, new lines for a live listener).
 *   pick_events     a slice of stream lines to events: the SSE/NDJSON payload of each line and, for the
 *                   OpenAI dialects, its fields picked by a strict JSON scanner; anything the scanner is not
 *                   sure of (bad JSON, an error object, odd types, escapes in keys) goes to the dialect's
 *                   Python parse_event, so both paths give the same events.
 *
 * Connections, timeouts, errors and records stay in Python. Nothing here blocks or keeps global state.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#ifdef __linux__
#include <sys/epoll.h>
#include <sys/socket.h>
#define HAVE_READ_LOOP 1
#endif

/* statuses, as llmload.client.transport.pyread names them */
#define ST_MORE 0
#define ST_DONE 1
#define ST_HEAD 2
#define ST_EOF 3
#define ST_OSERROR 4
#define ST_ERROR (-1)

/* body modes */
#define MODE_HEAD 0
#define MODE_CHUNKED 1
#define MODE_LENGTH 2
#define MODE_CLOSE 3
#define MODE_DONE 4

/* error codes (the Python side words the message) */
#define ERR_HEAD_TOO_LARGE 1
#define ERR_NO_CRLF 2
#define ERR_BAD_SIZE 3
#define ERR_CLOSED_BEFORE_RESPONSE 4
#define ERR_CLOSED_IN_HEAD 5
#define ERR_CLOSED_MID_STREAM 6

#define MAX_HEAD (1 << 20)
#define RECV_SIZE 65536
#define CMSG_BYTES 64
#define MAX_EVENTS 1024
#define LAG_BUCKETS 10001

/* ---------------------------------------------------------------------------------------------------------- */
/* a growable byte buffer */

typedef struct {
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t need) {
    if (need <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap *= 2;
    char *data = PyMem_Realloc(b->data, cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static int buf_append(Buf *b, const char *src, Py_ssize_t n) {
    if (n <= 0) return 0;
    if (buf_reserve(b, b->len + n) < 0) return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static void buf_free(Buf *b) {
    PyMem_Free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Decoder */

typedef struct {
    PyObject_HEAD
    int mode;
    int keep_body;
    int crlf;       /* chunked: the CRLF that closes a chunk's data is still due */
    int stamped;    /* the kernel timestamps this socket's arrivals */
    int notify;     /* a live listener wants to hear of new lines */
    long long remaining;
    double last_read;
    Buf raw;        /* received, not yet decoded (head, chunk framing) */
    Buf pending;    /* the incomplete last line */
    PyObject *lines;    /* list of (t, bytes) */
    PyObject *body;     /* list of bytes */
    PyObject *head;     /* bytes of the head once found, else None */
    PyObject *leftover; /* bytes past the end of the response */
    PyObject *error;    /* (code, detail bytes) or None */
    PyObject *sock;     /* not used here: the Python twin reads through it */
} Decoder;

static PyTypeObject DecoderType;

static int decoder_init(Decoder *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "", kwlist)) return -1;
    self->mode = MODE_HEAD;
    self->keep_body = 1;
    self->crlf = 0;
    self->stamped = 0;
    self->notify = 0;
    self->remaining = 0;
    self->last_read = 0.0;
    self->raw.len = self->pending.len = 0;
    Py_XSETREF(self->lines, PyList_New(0));
    Py_XSETREF(self->body, PyList_New(0));
    Py_XSETREF(self->head, Py_NewRef(Py_None));
    Py_XSETREF(self->leftover, PyBytes_FromStringAndSize("", 0));
    Py_XSETREF(self->error, Py_NewRef(Py_None));
    Py_XSETREF(self->sock, Py_NewRef(Py_None));
    if (self->lines == NULL || self->body == NULL || self->leftover == NULL) return -1;
    return 0;
}

static int decoder_traverse(Decoder *self, visitproc visit, void *arg) {
    Py_VISIT(self->lines);
    Py_VISIT(self->body);
    Py_VISIT(self->sock);
    return 0;
}

static int decoder_clear(Decoder *self) {
    Py_CLEAR(self->lines);
    Py_CLEAR(self->body);
    Py_CLEAR(self->head);
    Py_CLEAR(self->leftover);
    Py_CLEAR(self->error);
    Py_CLEAR(self->sock);
    return 0;
}

static void decoder_dealloc(Decoder *self) {
    PyObject_GC_UnTrack(self);
    decoder_clear(self);
    buf_free(&self->raw);
    buf_free(&self->pending);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int set_error(Decoder *self, int code, const char *detail, Py_ssize_t n) {
    PyObject *err = Py_BuildValue("(iy#)", code, detail, n);
    if (err == NULL) return -2;
    Py_SETREF(self->error, err);
    return ST_ERROR;
}

/* append one line (t, bytes) */
static int add_line(Decoder *self, PyObject *t, const char *s, Py_ssize_t n) {
    PyObject *line = PyBytes_FromStringAndSize(s, n);
    if (line == NULL) return -1;
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(line);
        return -1;
    }
    PyTuple_SET_ITEM(pair, 0, Py_NewRef(t));
    PyTuple_SET_ITEM(pair, 1, line);
    /* a float and bytes can make no cycle: the collector need never look at it (it would untrack it at its first
     * pass anyway, after traversing it); a stream holds one per line until it is parsed */
    PyObject_GC_UnTrack(pair);
    int rc = PyList_Append(self->lines, pair);
    Py_DECREF(pair);
    return rc;
}

/* the complete lines of pending + data, stamped t; the incomplete tail stays pending. A line is kept unless it
 * is empty or a lone CR (the Python twin's rule). */
static int split_lines(Decoder *self, PyObject *t, const char *data, Py_ssize_t n) {
    const char *end = data + n;
    const char *start = data;
    if (self->pending.len) {
        const char *nl = memchr(data, '\n', n);
        if (nl == NULL) return buf_append(&self->pending, data, n);
        if (buf_append(&self->pending, data, nl - data) < 0) return -1;
        const char *p = self->pending.data;
        Py_ssize_t len = self->pending.len;
        if (len > 1 || (len == 1 && p[0] != '\r')) {
            if (add_line(self, t, p, len) < 0) return -1;
        }
        self->pending.len = 0;
        start = nl + 1;
    }
    while (start < end) {
        const char *nl = memchr(start, '\n', end - start);
        if (nl == NULL) break;
        Py_ssize_t len = nl - start;
        if (len > 1 || (len == 1 && start[0] != '\r')) {
            if (add_line(self, t, start, len) < 0) return -1;
        }
        start = nl + 1;
    }
    if (start < end) return buf_append(&self->pending, start, end - start);
    return 0;
}

static int add_body(Decoder *self, const char *s, Py_ssize_t n) {
    PyObject *b = PyBytes_FromStringAndSize(s, n);
    if (b == NULL) return -1;
    int rc = PyList_Append(self->body, b);
    Py_DECREF(b);
    return rc;
}

static int decoded(Decoder *self, PyObject *t, const char *s, Py_ssize_t n) {
    if (self->keep_body && add_body(self, s, n) < 0) return -1;
    return split_lines(self, t, s, n);
}

static const char *find2(const char *s, Py_ssize_t n, const char *what, Py_ssize_t wn) {
    if (n < wn) return NULL;
    const char *end = s + n - wn + 1;
    const char *p = s;
    while (p < end) {
        p = memchr(p, what[0], end - p);
        if (p == NULL) return NULL;
        if (memcmp(p, what, wn) == 0) return p;
        p++;
    }
    return NULL;
}

static int is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return c - 'A' + 10;
}

static int finish(Decoder *self, const char *rest, Py_ssize_t n) {
    PyObject *left = PyBytes_FromStringAndSize(rest, n);
    if (left == NULL) return -2;
    Py_SETREF(self->leftover, left);
    self->mode = MODE_DONE;
    return ST_DONE;
}

/* chunked framing; raw is the whole undecoded input (the caller keeps it alive). Returns a status, -2 on a
 * Python error. What arrived before a framing error is kept. */
static int feed_chunked(Decoder *self, const char *raw, Py_ssize_t n, PyObject *t) {
    Py_ssize_t pos = 0;
    Buf dec = {NULL, 0, 0};
    int status = ST_MORE;
    for (;;) {
        if (self->remaining) {
            Py_ssize_t take = n - pos;
            if (take > self->remaining) take = (Py_ssize_t)self->remaining;
            if (take > 0) {
                if (buf_append(&dec, raw + pos, take) < 0) { status = -2; goto out; }
                pos += take;
                self->remaining -= take;
            }
            if (self->remaining) break;
            self->crlf = 1;
        }
        if (self->crlf) {
            if (n < pos + 2) break;
            if (raw[pos] != '\r' || raw[pos + 1] != '\n') {
                status = set_error(self, ERR_NO_CRLF, raw + pos, 2);
                goto out;
            }
            pos += 2;
            self->crlf = 0;
        }
        const char *crlf = find2(raw + pos, n - pos, "\r\n", 2);
        if (crlf == NULL) break;
        Py_ssize_t i = crlf - raw;
        /* the size field: before any ';', without trailing blanks; 1-16 hex digits */
        const char *semi = memchr(raw + pos, ';', i - pos);
        Py_ssize_t fend = semi ? semi - raw : i;
        while (fend > pos && (raw[fend - 1] == ' ' || raw[fend - 1] == '\t')) fend--;
        Py_ssize_t flen = fend - pos;
        int ok = flen >= 1 && flen <= 16;
        unsigned long long size = 0;
        for (Py_ssize_t k = pos; ok && k < fend; k++) {
            if (!is_hex(raw[k])) ok = 0;
            else size = (size << 4) | (unsigned long long)hex_value(raw[k]);
        }
        if (!ok) {
            Py_ssize_t dn = i - pos > 40 ? 40 : i - pos;
            status = set_error(self, ERR_BAD_SIZE, raw + pos, dn);
            goto out;
        }
        if (size == 0) {
            /* the last chunk, then optional trailers and an empty line */
            Py_ssize_t j;
            if (n - (i + 2) >= 2 && raw[i + 2] == '\r' && raw[i + 3] == '\n') {
                j = i + 2;
            } else {
                const char *e = find2(raw + i + 2, n - (i + 2), "\r\n\r\n", 4);
                if (e == NULL) break;
                j = (e - raw) + 2;
            }
            if (dec.len) {
                if (decoded(self, t, dec.data, dec.len) < 0) { status = -2; goto out; }
                dec.len = 0;
            }
            if (self->pending.len) {
                if (split_lines(self, t, "\n", 1) < 0) { status = -2; goto out; }
            }
            status = finish(self, raw + j + 2, n - (j + 2));
            goto out;
        }
        if (size > (unsigned long long)LLONG_MAX) size = (unsigned long long)LLONG_MAX;
        self->remaining = (long long)size;
        pos = i + 2;
    }
out:
    if (dec.len && status != -2) {
        if (decoded(self, t, dec.data, dec.len) < 0) status = -2;
    }
    buf_free(&dec);
    if (status == ST_MORE) {
        /* keep what is not decoded yet */
        Buf keep = {NULL, 0, 0};
        if (buf_append(&keep, raw + pos, n - pos) < 0) return -2;
        buf_free(&self->raw);
        self->raw = keep;
    } else {
        self->raw.len = 0;
    }
    return status;
}

static int feed_length(Decoder *self, const char *raw, Py_ssize_t n, PyObject *t) {
    Py_ssize_t take = n < self->remaining ? n : (Py_ssize_t)self->remaining;
    if (add_body(self, raw, take) < 0) return -2;
    self->remaining -= take;
    if (self->remaining) return ST_MORE;
    /* the whole body is one piece of text: its lines, the last one ended */
    Buf body = {NULL, 0, 0};
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(self->body); k++) {
        PyObject *piece = PyList_GET_ITEM(self->body, k);
        if (buf_append(&body, PyBytes_AS_STRING(piece), PyBytes_GET_SIZE(piece)) < 0) {
            buf_free(&body);
            return -2;
        }
    }
    int rc = split_lines(self, t, body.data ? body.data : "", body.len);
    if (rc == 0) rc = split_lines(self, t, "\n", 1);
    buf_free(&body);
    if (rc < 0) return -2;
    return finish(self, raw + take, n - take);
}

static int feed_bytes(Decoder *self, const char *data, Py_ssize_t n, PyObject *t) {
    /* raw = undecoded + data */
    const char *raw = data;
    Buf joined = {NULL, 0, 0};
    if (self->raw.len) {
        if (buf_append(&joined, self->raw.data, self->raw.len) < 0 || buf_append(&joined, data, n) < 0) {
            buf_free(&joined);
            return -2;
        }
        raw = joined.data;
        n = joined.len;
        self->raw.len = 0;
    }
    int status = ST_MORE;
    if (self->mode == MODE_HEAD) {
        const char *end = find2(raw, n, "\r\n\r\n", 4);
        Py_ssize_t e = end ? end - raw : -1;
        if (e > MAX_HEAD || (e < 0 && n > MAX_HEAD)) {
            status = set_error(self, ERR_HEAD_TOO_LARGE, "", 0);
        } else if (e < 0) {
            if (joined.data) {
                buf_free(&self->raw);
                self->raw = joined;
                joined.data = NULL;
                joined.len = joined.cap = 0;
            } else if (buf_append(&self->raw, raw, n) < 0) {
                status = -2;
            }
        } else {
            PyObject *head = PyBytes_FromStringAndSize(raw, e);
            if (head == NULL) {
                status = -2;
            } else {
                Py_SETREF(self->head, head);
                self->raw.len = 0;
                if (buf_append(&self->raw, raw + e + 4, n - (e + 4)) < 0) status = -2;
                else status = ST_HEAD;
            }
        }
    } else if (self->mode == MODE_CHUNKED) {
        status = feed_chunked(self, raw, n, t);
    } else if (self->mode == MODE_LENGTH) {
        status = feed_length(self, raw, n, t);
    } else if (self->mode == MODE_CLOSE) {
        if (n) {
            if (decoded(self, t, raw, n) < 0) status = -2;
        }
    } else {
        status = ST_DONE;
    }
    buf_free(&joined);
    return status;
}

static PyObject *status_result(int status) {
    if (status == -2) return NULL;
    return PyLong_FromLong(status);
}

static PyObject *decoder_feed(Decoder *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "feed(data, t)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *t = PyNumber_Float(args[1]);
    if (t == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    int status = feed_bytes(self, view.buf, view.len, t);
    Py_DECREF(t);
    PyBuffer_Release(&view);
    return status_result(status);
}

static PyObject *decoder_start_body(Decoder *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "start_body(mode, remaining, keep_body, t)");
        return NULL;
    }
    long mode = PyLong_AsLong(args[0]);
    long long remaining = PyLong_AsLongLong(args[1]);
    int keep = PyObject_IsTrue(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (mode < MODE_CHUNKED || mode > MODE_CLOSE) {
        PyErr_SetString(PyExc_ValueError, "start_body: not a body mode");
        return NULL;
    }
    PyObject *t = PyNumber_Float(args[3]);
    if (t == NULL) return NULL;
    self->mode = (int)mode;
    self->remaining = remaining;
    self->keep_body = keep;
    Buf rest = self->raw;
    self->raw.data = NULL;
    self->raw.len = self->raw.cap = 0;
    int status = feed_bytes(self, rest.data ? rest.data : "", rest.len, t);
    buf_free(&rest);
    Py_DECREF(t);
    return status_result(status);
}

static int decoder_eof_status(Decoder *self, PyObject *t) {
    if (self->pending.len && split_lines(self, t, "\n", 1) < 0) return -2;
    if (self->mode == MODE_CLOSE) return finish(self, "", 0);
    if (self->mode == MODE_DONE) return ST_DONE;
    if (self->mode == MODE_HEAD) {
        return set_error(self, self->raw.len ? ERR_CLOSED_IN_HEAD : ERR_CLOSED_BEFORE_RESPONSE, "", 0);
    }
    return set_error(self, ERR_CLOSED_MID_STREAM, "", 0);
}

static PyObject *decoder_eof(Decoder *self, PyObject *arg) {
    PyObject *t = PyNumber_Float(arg);
    if (t == NULL) return NULL;
    int status = decoder_eof_status(self, t);
    Py_DECREF(t);
    return status_result(status);
}

static PyObject *decoder_get_untouched(Decoder *self, void *closure) {
    return PyBool_FromLong(self->mode == MODE_HEAD && self->raw.len == 0);
}

static PyMethodDef decoder_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))decoder_feed, METH_FASTCALL,
     "feed(data, t) -> status: take the next bytes of the response, received at t"},
    {"start_body", (PyCFunction)(void (*)(void))decoder_start_body, METH_FASTCALL,
     "start_body(mode, remaining, keep_body, t) -> status: the head is parsed; decode what followed it"},
    {"eof", (PyCFunction)decoder_eof, METH_O, "eof(t) -> status: the server closed the connection"},
    {NULL}
};

static PyMemberDef decoder_members[] = {
    {"mode", T_INT, offsetof(Decoder, mode), READONLY, "the body's framing (a MODE_ constant)"},
    {"stamped", T_INT, offsetof(Decoder, stamped), 0, "the kernel stamps arrivals on this socket"},
    {"notify", T_INT, offsetof(Decoder, notify), 0, "report reads that completed lines"},
    {"last_read", T_DOUBLE, offsetof(Decoder, last_read), 0, "when data last arrived"},
    {"lines", T_OBJECT, offsetof(Decoder, lines), READONLY, "(t, line) of every complete line"},
    {"body", T_OBJECT, offsetof(Decoder, body), READONLY, "the body's pieces, where kept"},
    {"head", T_OBJECT, offsetof(Decoder, head), READONLY, "the response head once found"},
    {"leftover", T_OBJECT, offsetof(Decoder, leftover), READONLY, "bytes past the end of the response"},
    {"error", T_OBJECT, offsetof(Decoder, error), READONLY, "(code, detail) of a framing error"},
    {"sock", T_OBJECT, offsetof(Decoder, sock), 0, "the socket (read through by the Python twin only)"},
    {NULL}
};

static PyGetSetDef decoder_getset[] = {
    {"untouched", (getter)decoder_get_untouched, NULL, "not one byte of the response has arrived", NULL},
    {NULL}
};

static PyTypeObject DecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "llmload.client.transport._cread.Decoder",
    .tp_doc = "One HTTP/1.1 response's framing undone into timestamped lines (twin of pyread.Decoder).",
    .tp_basicsize = sizeof(Decoder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)decoder_init,
    .tp_dealloc = (destructor)decoder_dealloc,
    .tp_traverse = (traverseproc)decoder_traverse,
    .tp_clear = (inquiry)decoder_clear,
    .tp_methods = decoder_methods,
    .tp_members = decoder_members,
    .tp_getset = decoder_getset,
};

/* ---------------------------------------------------------------------------------------------------------- */
/* ReadLoop */

#ifdef HAVE_READ_LOOP

typedef struct {
    PyObject_HEAD
    PyObject *ep;
    PyObject *lag;          /* a writable buffer of LAG_BUCKETS int64 counters */
    double clock_offset;    /* CLOCK_REALTIME - CLOCK_MONOTONIC, in seconds */
    char *buf;
    struct epoll_event *events;
} ReadLoop;

static PyTypeObject ReadLoopType;

static int readloop_init(ReadLoop *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"ep", "lag", "clock_offset", NULL};
    PyObject *ep, *lag;
    double offset = 0.0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|d", kwlist, &ep, &lag, &offset)) return -1;
    Py_buffer view;
    if (PyObject_GetBuffer(lag, &view, PyBUF_WRITABLE) < 0) return -1;
    Py_ssize_t len = view.len;
    PyBuffer_Release(&view);
    if (len != (Py_ssize_t)(LAG_BUCKETS * sizeof(int64_t))) {
        PyErr_SetString(PyExc_ValueError, "lag: 10001 int64 counters");
        return -1;
    }
    Py_XSETREF(self->ep, Py_NewRef(ep));
    Py_XSETREF(self->lag, Py_NewRef(lag));
    self->clock_offset = offset;
    if (self->buf == NULL) self->buf = PyMem_Malloc(RECV_SIZE);
    if (self->events == NULL) self->events = PyMem_Malloc(sizeof(struct epoll_event) * MAX_EVENTS);
    if (self->buf == NULL || self->events == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static int readloop_traverse(ReadLoop *self, visitproc visit, void *arg) {
    Py_VISIT(self->ep);
    Py_VISIT(self->lag);
    return 0;
}

static int readloop_clear(ReadLoop *self) {
    Py_CLEAR(self->ep);
    Py_CLEAR(self->lag);
    return 0;
}

static void readloop_dealloc(ReadLoop *self) {
    PyObject_GC_UnTrack(self);
    readloop_clear(self);
    PyMem_Free(self->buf);
    PyMem_Free(self->events);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static double monotonic_now(void) {
    /* time.perf_counter() on Linux: CLOCK_MONOTONIC, as nanoseconds turned into seconds */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    return (double)ns / 1e9;
}

static int report(PyObject *out, int fd, int status, double t, Py_ssize_t first, int err) {
    PyObject *item = Py_BuildValue("(iidni)", fd, status, t, first, err);
    if (item == NULL) return -1;
    int rc = PyList_Append(out, item);
    Py_DECREF(item);
    return rc;
}

static PyObject *readloop_read_ready(ReadLoop *self, PyObject *decoders) {
    if (!PyDict_Check(decoders)) {
        PyErr_SetString(PyExc_TypeError, "read_ready(decoders): a dict of fd -> Decoder");
        return NULL;
    }
    PyObject *fdobj = PyObject_CallMethod(self->ep, "fileno", NULL);
    if (fdobj == NULL) return NULL;
    int epfd = (int)PyLong_AsLong(fdobj);
    Py_DECREF(fdobj);
    if (epfd < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "the epoll set is closed");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(self->lag, &view, PyBUF_WRITABLE) < 0) return NULL;
    int64_t *lag = view.buf;
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    /* a zero timeout never blocks: the GIL stays held (handing it to another thread could cost its switch
     * interval, 5 ms, before this read loop got it back) */
    int n = epoll_wait(epfd, self->events, MAX_EVENTS, 0);
    if (n < 0) {
        n = 0;  /* EINTR: the next wake-up reads them */
    }
    char cmsgbuf[CMSG_BYTES];
    for (int k = 0; k < n; k++) {
        int fd = self->events[k].data.fd;
        PyObject *key = PyLong_FromLong(fd);
        if (key == NULL) goto fail;
        PyObject *obj = PyDict_GetItemWithError(decoders, key);
        Py_DECREF(key);
        if (obj == NULL) {
            if (PyErr_Occurred()) goto fail;
            continue;
        }
        if (!PyObject_TypeCheck(obj, &DecoderType)) {
            PyErr_SetString(PyExc_TypeError, "read_ready: not a Decoder");
            goto fail;
        }
        Decoder *dec = (Decoder *)obj;
        struct iovec iov = {self->buf, RECV_SIZE};
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        if (dec->stamped) {
            msg.msg_control = cmsgbuf;
            msg.msg_controllen = sizeof cmsgbuf;
        }
        ssize_t got = recvmsg(fd, &msg, MSG_DONTWAIT);
        if (got < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
            if (report(out, fd, ST_OSERROR, monotonic_now(), -1, errno) < 0) goto fail;
            continue;
        }
        double t = monotonic_now();
        if (dec->stamped && msg.msg_controllen > 0) {
            for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
                    struct timespec ts;
                    memcpy(&ts, CMSG_DATA(c), sizeof ts);
                    double arrived = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 - self->clock_offset;
                    if (t - 1.0 < arrived && arrived < t) {
                        /* how late this process read it: past one inter-token gap, chunks merge */
                        long long bucket = (long long)((t - arrived) * 10000);
                        lag[bucket < LAG_BUCKETS - 1 ? bucket : LAG_BUCKETS - 1] += 1;
                        t = arrived;
                    }
                    break;
                }
            }
        }
        dec->last_read = t;
        if (got == 0) {
            if (report(out, fd, ST_EOF, t, -1, 0) < 0) goto fail;
            continue;
        }
        Py_ssize_t first = PyList_GET_SIZE(dec->lines);
        PyObject *tobj = PyFloat_FromDouble(t);
        if (tobj == NULL) goto fail;
        Py_INCREF(dec);  /* a listener elsewhere cannot free it mid-feed; nothing runs here, but be plain */
        int status = feed_bytes(dec, self->buf, got, tobj);
        Py_DECREF(tobj);
        Py_ssize_t now = dec->lines ? PyList_GET_SIZE(dec->lines) : first;
        Py_DECREF(dec);
        if (status == -2) goto fail;
        int grew = dec->notify && now > first;
        if (status != ST_MORE || grew) {
            if (report(out, fd, status, t, grew ? first : -1, 0) < 0) goto fail;
        }
    }
    PyBuffer_Release(&view);
    return out;
fail:
    PyBuffer_Release(&view);
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef readloop_methods[] = {
    {"read_ready", (PyCFunction)readloop_read_ready, METH_O,
     "read_ready(decoders) -> [(fd, status, t, first, errno)]: read every ready socket once"},
    {NULL}
};

static PyMemberDef readloop_members[] = {
    {"clock_offset", T_DOUBLE, offsetof(ReadLoop, clock_offset), 0, "wall clock - perf_counter, in seconds"},
    {"ep", T_OBJECT, offsetof(ReadLoop, ep), READONLY, "the epoll set"},
    {"lag", T_OBJECT, offsetof(ReadLoop, lag), READONLY, "the read-lag histogram (0.1 ms buckets)"},
    {NULL}
};

static PyTypeObject ReadLoopType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "llmload.client.transport._cread.ReadLoop",
    .tp_doc = "One wake-up's reads of every ready socket of an epoll set (twin of pyread.ReadLoop).",
    .tp_basicsize = sizeof(ReadLoop),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)readloop_init,
    .tp_dealloc = (destructor)readloop_dealloc,
    .tp_traverse = (traverseproc)readloop_traverse,
    .tp_clear = (inquiry)readloop_clear,
    .tp_methods = readloop_methods,
    .tp_members = readloop_members,
};

#endif /* HAVE_READ_LOOP */

/* ---------------------------------------------------------------------------------------------------------- */
/* pick_events: the OpenAI event scanner
 *
 * It reads only what OpenAICompletions._event reads (llmload/client/backends/openai.py) and gives up ("punts")
 * on whatever it is not certain to read the same way as orjson + that method: then the dialect's own
 * parse_event decides. */

#define PUNT 1
#define MAX_DEPTH 64

typedef struct {
    const char *s;
    const char *end;
} Span;

typedef struct {
    const char *p;
    const char *end;
    int depth;
} Scan;

static void skip_ws(Scan *sc) {
    while (sc->p < sc->end && (*sc->p == ' ' || *sc->p == '\t' || *sc->p == '\n' || *sc->p == '\r')) sc->p++;
}

/* one UTF-8 sequence at p (first byte >= 0x80) as orjson accepts it; returns its length or 0 */
static int utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    int n;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; }
    else return 0;
    if (end - p < n) return 0;
    for (int k = 1; k < n; k++) {
        if ((p[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[k] & 0x3F);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return n;
}

/* a string at sc->p (on the quote); its raw span (without quotes) in *out, *escaped when it holds escapes */
static int scan_string(Scan *sc, Span *out, int *escaped) {
    const unsigned char *p = (const unsigned char *)sc->p + 1;
    const unsigned char *end = (const unsigned char *)sc->end;
    *escaped = 0;
    out->s = (const char *)p;
    while (p < end) {
        unsigned char c = *p;
        if (c == '"') {
            out->end = (const char *)p;
            sc->p = (const char *)p + 1;
            return 0;
        }
        if (c < 0x20) return PUNT;
        if (c == '\\') {
            *escaped = 1;
            if (p + 1 >= end) return PUNT;
            unsigned char e = p[1];
            if (e == 'u') {
                if (end - p < 6) return PUNT;
                unsigned v = 0;
                for (int k = 2; k < 6; k++) {
                    if (!is_hex((char)p[k])) return PUNT;
                    v = (v << 4) | (unsigned)hex_value((char)p[k]);
                }
                if (v >= 0xD800 && v <= 0xDFFF) return PUNT; /* surrogates: orjson's rules, not ours */
                p += 6;
                continue;
            }
            if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' && e != 't')
                return PUNT;
            p += 2;
            continue;
        }
        if (c >= 0x80) {
            int n = utf8_len(p, end);
            if (!n) return PUNT;
            p += n;
            continue;
        }
        p++;
    }
    return PUNT;
}

/* the str of a string span (escapes undone) */
static PyObject *string_value(Span sp, int escaped) {
    if (!escaped) return PyUnicode_DecodeUTF8(sp.s, sp.end - sp.s, "strict");
    Py_ssize_t cap = sp.end - sp.s;
    char *buf = PyMem_Malloc(cap ? cap : 1);
    if (buf == NULL) return PyErr_NoMemory();
    Py_ssize_t n = 0;
    const char *p = sp.s;
    while (p < sp.end) {
        if (*p != '\\') {
            buf[n++] = *p++;
            continue;
        }
        char e = p[1];
        if (e == 'u') {
            unsigned v = 0;
            for (int k = 2; k < 6; k++) v = (v << 4) | (unsigned)hex_value(p[k]);
            if (v < 0x80) buf[n++] = (char)v;
            else if (v < 0x800) {
                buf[n++] = (char)(0xC0 | (v >> 6));
                buf[n++] = (char)(0x80 | (v & 0x3F));
            } else {
                buf[n++] = (char)(0xE0 | (v >> 12));
                buf[n++] = (char)(0x80 | ((v >> 6) & 0x3F));
                buf[n++] = (char)(0x80 | (v & 0x3F));
            }
            p += 6;
            continue;
        }
        switch (e) {
            case 'b': buf[n++] = '\b'; break;
            case 'f': buf[n++] = '\f'; break;
            case 'n': buf[n++] = '\n'; break;
            case 'r': buf[n++] = '\r'; break;
            case 't': buf[n++] = '\t'; break;
            default: buf[n++] = e; break;
        }
        p += 2;
    }
    PyObject *s = PyUnicode_DecodeUTF8(buf, n, "strict");
    PyMem_Free(buf);
    return s;
}

/* a number at sc->p. *is_int: an integer literal (no fraction, no exponent) that fits 18 digits, in *value */
static int scan_number(Scan *sc, int *is_int, long long *value) {
    const char *p = sc->p;
    const char *end = sc->end;
    int neg = 0;
    if (p < end && *p == '-') { neg = 1; p++; }
    if (p >= end) return PUNT;
    const char *digits = p;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (p < end && *p >= '0' && *p <= '9') p++;
    else return PUNT;
    Py_ssize_t nd = p - digits;
    int frac = 0, exp = 0;
    if (p < end && *p == '.') {
        frac = 1;
        p++;
        if (p >= end || *p < '0' || *p > '9') return PUNT;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        exp = 1;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        const char *ed = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p == ed || p - ed > 2) return PUNT;  /* out of a double's range is orjson's to refuse */
    }
    if (nd > 18) return PUNT;  /* orjson turns big integers into floats */
    sc->p = p;
    *is_int = !frac && !exp;
    if (*is_int) {
        long long v = 0;
        for (const char *d = digits; d < digits + nd; d++) v = v * 10 + (*d - '0');
        *value = neg ? -v : v;
    }
    return 0;
}

static int expect_literal(Scan *sc, const char *lit, Py_ssize_t n) {
    if (sc->end - sc->p < n || memcmp(sc->p, lit, n) != 0) return PUNT;
    sc->p += n;
    return 0;
}

/* kinds of a value */
#define V_NULL 0
#define V_FALSE 1
#define V_TRUE 2
#define V_INT 3
#define V_FLOAT 4
#define V_STRING 5
#define V_ARRAY 6
#define V_OBJECT 7

typedef struct {
    int kind;
    long long ival;
    Span str;
    int escaped;
    Py_ssize_t items;  /* members of an object or elements of an array */
} Value;

static int skip_value(Scan *sc, Value *v);

static int skip_container(Scan *sc, char close, int object, Py_ssize_t *items) {
    if (++sc->depth > MAX_DEPTH) return PUNT;
    sc->p++;
    *items = 0;
    skip_ws(sc);
    if (sc->p < sc->end && *sc->p == close) {
        sc->p++;
        sc->depth--;
        return 0;
    }
    for (;;) {
        Value v;
        skip_ws(sc);
        if (object) {
            Span key;
            int esc;
            if (sc->p >= sc->end || *sc->p != '"' || scan_string(sc, &key, &esc)) return PUNT;
            skip_ws(sc);
            if (sc->p >= sc->end || *sc->p != ':') return PUNT;
            sc->p++;
            skip_ws(sc);
        }
        if (skip_value(sc, &v)) return PUNT;
        (*items)++;
        skip_ws(sc);
        if (sc->p >= sc->end) return PUNT;
        if (*sc->p == ',') {
            sc->p++;
            continue;
        }
        if (*sc->p == close) {
            sc->p++;
            sc->depth--;
            return 0;
        }
        return PUNT;
    }
}

/* any value, validated; what it is in *v */
static int skip_value(Scan *sc, Value *v) {
    if (sc->p >= sc->end) return PUNT;
    char c = *sc->p;
    v->items = 0;
    switch (c) {
        case '"':
            v->kind = V_STRING;
            return scan_string(sc, &v->str, &v->escaped);
        case '{':
            v->kind = V_OBJECT;
            return skip_container(sc, '}', 1, &v->items);
        case '[':
            v->kind = V_ARRAY;
            return skip_container(sc, ']', 0, &v->items);
        case 't':
            v->kind = V_TRUE;
            return expect_literal(sc, "true", 4);
        case 'f':
            v->kind = V_FALSE;
            return expect_literal(sc, "false", 5);
        case 'n':
            v->kind = V_NULL;
            return expect_literal(sc, "null", 4);
        default: {
            int is_int = 0;
            if (scan_number(sc, &is_int, &v->ival)) return PUNT;
            v->kind = is_int ? V_INT : V_FLOAT;
            return 0;
        }
    }
}

/* iterate an object's members: calls visit(key, sc) positioned on the value, which must consume it */
typedef int (*member_fn)(void *ctx, Span key, Scan *sc);

static int scan_object(Scan *sc, member_fn visit, void *ctx) {
    if (sc->p >= sc->end || *sc->p != '{') return PUNT;
    if (++sc->depth > MAX_DEPTH) return PUNT;
    sc->p++;
    skip_ws(sc);
    if (sc->p < sc->end && *sc->p == '}') {
        sc->p++;
        sc->depth--;
        return 0;
    }
    for (;;) {
        Span key;
        int esc;
        skip_ws(sc);
        if (sc->p >= sc->end || *sc->p != '"' || scan_string(sc, &key, &esc)) return PUNT;
        if (esc) return PUNT;  /* a key spelled with escapes could be any key */
        skip_ws(sc);
        if (sc->p >= sc->end || *sc->p != ':') return PUNT;
        sc->p++;
        skip_ws(sc);
        if (visit(ctx, key, sc)) return PUNT;
        skip_ws(sc);
        if (sc->p >= sc->end) return PUNT;
        if (*sc->p == ',') {
            sc->p++;
            continue;
        }
        if (*sc->p == '}') {
            sc->p++;
            sc->depth--;
            return 0;
        }
        return PUNT;
    }
}

static int key_is(Span key, const char *name) {
    size_t n = strlen(name);
    return (size_t)(key.end - key.s) == n && memcmp(key.s, name, n) == 0;
}

/* what the event says, as the scanner found it */
typedef struct {
    unsigned seen;        /* bit per key of interest: a second one punts (orjson keeps the last) */
    int has_choices;      /* choices is a non-empty array */
    int has_delta;        /* choices[0].delta is an object */
    Value text, content, reasoning_content, reasoning, finish_reason;
    int tool_calls;       /* delta.tool_calls is truthy */
    int has_usage;
    Value completion_tokens, prompt_tokens, cached_tokens;
} Picked;

enum {
    K_CHOICES = 1 << 0, K_USAGE = 1 << 1, K_ERROR = 1 << 2, K_OBJECT = 1 << 3, K_DELTA = 1 << 4,
    K_TEXT = 1 << 5, K_FINISH = 1 << 6, K_CONTENT = 1 << 7, K_RCONTENT = 1 << 8, K_REASONING = 1 << 9,
    K_TOOLS = 1 << 10, K_CTOK = 1 << 11, K_PTOK = 1 << 12, K_DETAILS = 1 << 13, K_CACHED = 1 << 14,
    K_CHOICE_DELTA_NULL = 1 << 15
};

static int once(Picked *pk, unsigned bit) {
    if (pk->seen & bit) return PUNT;
    pk->seen |= bit;
    return 0;
}

static int count_value(Scan *sc, Value *v) {
    /* a usage count: an integer, or anything as_int() turns into None; a float punts (5.0 is 5 there) */
    if (skip_value(sc, v)) return PUNT;
    if (v->kind == V_FLOAT) return PUNT;
    return 0;
}

static int visit_details(void *ctx, Span key, Scan *sc) {
    Picked *pk = ctx;
    Value v;
    if (key_is(key, "cached_tokens")) {
        if (once(pk, K_CACHED)) return PUNT;
        if (count_value(sc, &v)) return PUNT;
        pk->cached_tokens = v;
        return 0;
    }
    return skip_value(sc, &v);
}

static int visit_usage(void *ctx, Span key, Scan *sc) {
    Picked *pk = ctx;
    Value v;
    if (key_is(key, "completion_tokens")) {
        if (once(pk, K_CTOK) || count_value(sc, &v)) return PUNT;
        pk->completion_tokens = v;
        return 0;
    }
    if (key_is(key, "prompt_tokens")) {
        if (once(pk, K_PTOK) || count_value(sc, &v)) return PUNT;
        pk->prompt_tokens = v;
        return 0;
    }
    if (key_is(key, "prompt_tokens_details")) {
        if (once(pk, K_DETAILS)) return PUNT;
        if (sc->p < sc->end && *sc->p == '{') return scan_object(sc, visit_details, pk);
        return skip_value(sc, &v);  /* not a dict: no cached count */
    }
    return skip_value(sc, &v);
}

static int visit_delta(void *ctx, Span key, Scan *sc) {
    Picked *pk = ctx;
    Value v;
    if (key_is(key, "content")) {
        if (once(pk, K_CONTENT) || skip_value(sc, &v)) return PUNT;
        pk->content = v;
        return 0;
    }
    if (key_is(key, "reasoning_content")) {
        if (once(pk, K_RCONTENT) || skip_value(sc, &v)) return PUNT;
        pk->reasoning_content = v;
        return 0;
    }
    if (key_is(key, "reasoning")) {
        if (once(pk, K_REASONING) || skip_value(sc, &v)) return PUNT;
        pk->reasoning = v;
        return 0;
    }
    if (key_is(key, "tool_calls")) {
        if (once(pk, K_TOOLS) || skip_value(sc, &v)) return PUNT;
        switch (v.kind) {
            case V_NULL: case V_FALSE: pk->tool_calls = 0; break;
            case V_TRUE: pk->tool_calls = 1; break;
            case V_ARRAY: case V_OBJECT: pk->tool_calls = v.items > 0; break;
            case V_STRING: pk->tool_calls = v.str.end > v.str.s; break;
            default: return PUNT;  /* a number: its truth is Python's */
        }
        return 0;
    }
    return skip_value(sc, &v);
}

static int visit_choice(void *ctx, Span key, Scan *sc) {
    Picked *pk = ctx;
    Value v;
    if (key_is(key, "delta")) {
        if (once(pk, K_DELTA)) return PUNT;
        if (sc->p < sc->end && *sc->p == '{') {
            pk->has_delta = 1;
            return scan_object(sc, visit_delta, pk);
        }
        if (skip_value(sc, &v)) return PUNT;
        return v.kind == V_NULL ? 0 : PUNT;  /* a delta that is not a dict: malformed, Python's to word */
    }
    if (key_is(key, "text")) {
        if (once(pk, K_TEXT) || skip_value(sc, &v)) return PUNT;
        pk->text = v;
        return 0;
    }
    if (key_is(key, "finish_reason")) {
        if (once(pk, K_FINISH) || skip_value(sc, &v)) return PUNT;
        pk->finish_reason = v;
        return 0;
    }
    return skip_value(sc, &v);
}

static int scan_choices(Scan *sc, Picked *pk) {
    Value v;
    if (sc->p >= sc->end) return PUNT;
    if (*sc->p != '[') {
        if (skip_value(sc, &v)) return PUNT;
        return v.kind == V_NULL ? 0 : PUNT;  /* other falsy or odd choices: Python's */
    }
    if (++sc->depth > MAX_DEPTH) return PUNT;
    sc->p++;
    skip_ws(sc);
    if (sc->p < sc->end && *sc->p == ']') {
        sc->p++;
        sc->depth--;
        return 0;
    }
    /* the first choice must be an object: it is the one read */
    if (sc->p >= sc->end || *sc->p != '{') return PUNT;
    pk->has_choices = 1;
    if (scan_object(sc, visit_choice, pk)) return PUNT;
    for (;;) {
        skip_ws(sc);
        if (sc->p >= sc->end) return PUNT;
        if (*sc->p == ']') {
            sc->p++;
            sc->depth--;
            return 0;
        }
        if (*sc->p != ',') return PUNT;
        sc->p++;
        skip_ws(sc);
        if (skip_value(sc, &v)) return PUNT;
    }
}

static int visit_top(void *ctx, Span key, Scan *sc) {
    Picked *pk = ctx;
    Value v;
    if (key_is(key, "choices")) {
        if (once(pk, K_CHOICES)) return PUNT;
        return scan_choices(sc, pk);
    }
    if (key_is(key, "usage")) {
        if (once(pk, K_USAGE)) return PUNT;
        if (sc->p < sc->end && *sc->p == '{') {
            pk->has_usage = 1;
            return scan_object(sc, visit_usage, pk);
        }
        if (skip_value(sc, &v)) return PUNT;
        return v.kind == V_NULL ? 0 : PUNT;
    }
    if (key_is(key, "error")) {
        if (once(pk, K_ERROR) || skip_value(sc, &v)) return PUNT;
        return v.kind == V_NULL ? 0 : PUNT;  /* an error object: Python words it */
    }
    if (key_is(key, "object")) {
        if (once(pk, K_OBJECT) || skip_value(sc, &v)) return PUNT;
        if (v.kind == V_STRING && !v.escaped && v.str.end - v.str.s == 5 && memcmp(v.str.s, "error", 5) == 0)
            return PUNT;
        if (v.kind == V_STRING && v.escaped) return PUNT;
        return 0;
    }
    return skip_value(sc, &v);
}

/* str of a value where as_str() would give one, else "" */
static PyObject *as_str(Value *v) {
    if (v->kind == V_STRING && (v->str.end > v->str.s)) return string_value(v->str, v->escaped);
    return PyUnicode_FromStringAndSize("", 0);
}

static PyObject *as_int(Value *v, int present) {
    if (present && v->kind == V_INT) return PyLong_FromLongLong(v->ival);
    Py_RETURN_NONE;
}

/* the event tuple (StreamEvent's field order) for a payload, Py_None to punt, NULL on a Python error */
static PyObject *pick_openai(const char *s, Py_ssize_t n) {
    Picked pk;
    memset(&pk, 0, sizeof pk);
    Scan sc = {s, s + n, 0};
    skip_ws(&sc);
    if (scan_object(&sc, visit_top, &pk)) Py_RETURN_NONE;
    skip_ws(&sc);
    if (sc.p != sc.end) Py_RETURN_NONE;
    int ctok = (pk.seen & K_CTOK) && pk.completion_tokens.kind == V_INT;
    int ptok = (pk.seen & K_PTOK) && pk.prompt_tokens.kind == V_INT;
    int cached = (pk.seen & K_CACHED) && pk.cached_tokens.kind == V_INT;
    PyObject *text = NULL, *reasoning = NULL, *finish = NULL, *ct = NULL, *pt = NULL, *ca = NULL;
    PyObject *result = NULL;
    ct = as_int(&pk.completion_tokens, ctok);
    pt = as_int(&pk.prompt_tokens, ptok);
    if (ct == NULL || pt == NULL) goto done;
    if (!pk.has_choices) {
        if (!ctok && !ptok) {
            result = Py_BuildValue("(sOOOOOOOsO)", "", Py_False, Py_False, Py_None, Py_None, Py_None, Py_None,
                                   Py_None, "", Py_None);
            goto done;
        }
        ca = as_int(&pk.cached_tokens, cached);
        if (ca == NULL) goto done;
        result = Py_BuildValue("(sOOOOOOOsO)", "", Py_False, Py_False, Py_None, ct, pt, Py_None, Py_None, "", ca);
        goto done;
    }
    int content;
    if (!pk.has_delta) {
        text = as_str(&pk.text);
        reasoning = PyUnicode_FromStringAndSize("", 0);
        if (text == NULL || reasoning == NULL) goto punt_or_fail;
        content = PyUnicode_GET_LENGTH(text) > 0;
    } else {
        text = as_str(&pk.content);
        if (text == NULL) goto punt_or_fail;
        reasoning = as_str(&pk.reasoning_content);
        if (reasoning == NULL) goto punt_or_fail;
        if (PyUnicode_GET_LENGTH(reasoning) == 0) {
            Py_DECREF(reasoning);
            reasoning = as_str(&pk.reasoning);
            if (reasoning == NULL) goto punt_or_fail;
        }
        content = PyUnicode_GET_LENGTH(text) > 0 || PyUnicode_GET_LENGTH(reasoning) > 0 || pk.tool_calls;
    }
    if ((pk.seen & K_FINISH) && pk.finish_reason.kind == V_STRING) {
        finish = string_value(pk.finish_reason.str, pk.finish_reason.escaped);
        if (finish == NULL) goto punt_or_fail;
    } else {
        finish = Py_NewRef(Py_None);
    }
    if (ctok || ptok) ca = as_int(&pk.cached_tokens, cached);
    else ca = Py_NewRef(Py_None);
    if (ca == NULL) goto done;
    result = Py_BuildValue("(OOOOOOOOOO)", text, content ? Py_True : Py_False, Py_True, Py_None, ct, pt, finish,
                           Py_None, reasoning, ca);
    goto done;
punt_or_fail:
    /* a string that is not valid UTF-8 after all: orjson's to refuse */
    if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        result = Py_NewRef(Py_None);
    }
done:
    Py_XDECREF(text);
    Py_XDECREF(reasoning);
    Py_XDECREF(finish);
    Py_XDECREF(ct);
    Py_XDECREF(pt);
    Py_XDECREF(ca);
    return result;
}

/* the payload of one stream line (llmload.client.sse.parse_line), or len -1 for none (also for [DONE]) */
static Py_ssize_t line_payload(const char *line, Py_ssize_t n, const char **payload) {
    const char *p;
    Py_ssize_t len;
    if (n >= 5 && memcmp(line, "data:", 5) == 0) {
        p = (n > 5 && line[5] == ' ') ? line + 6 : line + 5;
        len = line + n - p;
    } else if (n >= 1 && line[0] == '{') {
        p = line;
        len = n;
    } else {
        return -1;
    }
    while (len > 0 && (p[len - 1] == '\r' || p[len - 1] == '\n')) len--;
    if (len == 0) return -1;
    if (len == 6 && memcmp(p, "[DONE]", 6) == 0) return -1;
    *payload = p;
    return len;
}

static PyObject *pick_events(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "pick_events(lines, start, stop, parse_event, state, openai)");
        return NULL;
    }
    PyObject *lines = args[0];
    if (!PyList_Check(lines)) {
        PyErr_SetString(PyExc_TypeError, "pick_events: lines must be a list");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) return NULL;
    PyObject *parse_event = args[3];
    PyObject *state = args[4];
    int openai = PyObject_IsTrue(args[5]);
    if (openai < 0) return NULL;
    if (start < 0) start = 0;
    if (stop > PyList_GET_SIZE(lines)) stop = PyList_GET_SIZE(lines);
    PyObject *out = PyList_New(stop > start ? stop - start : 0);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *pair = PyList_GET_ITEM(lines, i);
        PyObject *line;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyBytes_Check(line = PyTuple_GET_ITEM(pair, 1))) {
            PyErr_SetString(PyExc_TypeError, "pick_events: lines are (t, bytes) pairs");
            goto fail;
        }
        const char *payload;
        Py_ssize_t len = line_payload(PyBytes_AS_STRING(line), PyBytes_GET_SIZE(line), &payload);
        PyObject *ev;
        if (len < 0) {
            ev = Py_NewRef(Py_None);
        } else {
            ev = openai ? pick_openai(payload, len) : Py_NewRef(Py_None);
            if (ev == NULL) goto fail;
            if (ev == Py_None) {
                Py_DECREF(ev);
                PyObject *bytes = PyBytes_FromStringAndSize(payload, len);
                if (bytes == NULL) goto fail;
                ev = PyObject_CallFunctionObjArgs(parse_event, bytes, state, NULL);
                Py_DECREF(bytes);
                if (ev == NULL) goto fail;
            }
        }
        PyList_SET_ITEM(out, i - start, ev);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------------- */

static PyMethodDef module_methods[] = {
    {"pick_events", (PyCFunction)(void (*)(void))pick_events, METH_FASTCALL,
     "pick_events(lines, start, stop, parse_event, state, openai) -> [event tuple or None per line]"},
    {NULL}
};

static struct PyModuleDef cread_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "llmload.client.transport._cread",
    .m_doc = "The compiled reader: twin of llmload.client.transport.pyread (docs/design.md, 'The compiled reader').",
    .m_size = 0,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__cread(void) {
    if (PyType_Ready(&DecoderType) < 0) return NULL;
#ifdef HAVE_READ_LOOP
    if (PyType_Ready(&ReadLoopType) < 0) return NULL;
#endif
    PyObject *m = PyModule_Create(&cread_module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Decoder", (PyObject *)&DecoderType) < 0) goto fail;
#ifdef HAVE_READ_LOOP
    if (PyModule_AddObjectRef(m, "ReadLoop", (PyObject *)&ReadLoopType) < 0) goto fail;
#endif
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
