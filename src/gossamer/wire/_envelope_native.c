/* The hot path of gossamer.wire.envelope.unseal, in C.
 *
 * Why C: in CPython the bookkeeping around one AES-GCM call (finding the session's
 * cipher, the replay window, the result object) costs about 0.9 us, twice the call
 * itself for a 200-byte message; done here it costs about a fifth of that
 * (docs/wire.md, "Speed"; bench/envelope.py).
 *
 * What it does: exactly the fast path of unseal, nothing more. A message of a sender's
 * current session, under a key id that already opened one of its messages and is still
 * installed (ReplayWindows._fast, checked against Keyring._token), uncompressed, well
 * formed and fresh is authenticated and decrypted by the session's AESGCM object (the
 * cryptography library does the cryptography; nothing here touches a key), recorded in
 * the sender's replay window and returned as an Opened. For anything else open_fast
 * returns None and unseal's Python code decides, so both accept and reject exactly the
 * same input; tests/wire/test_envelope_native.py checks that difference by difference.
 * The one error raised here is a failed authentication, built by envelope._forged.
 *
 * The Python objects it reads and writes are the slotted classes of envelope.py and
 * keyring.py. configure() finds the byte offsets of their slots once (from the member
 * descriptors that __slots__ creates), so a slot is read or written as a struct field;
 * an object of any other type, a subclass included, is left to the Python code. Writing
 * the slots of the frozen Opened directly is what its own __init__ does through
 * object.__setattr__.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* Header layout (envelope.py): version, flags, key id (4), n, sender (n), epoch (8),
 * session id (16), seq (8); then the ciphertext and the 16-byte tag. */
#define FIXED 39
#define TAG 16
#define MIN_SIZE (FIXED + 1 + TAG)
#define KEYED_START 2
#define VERSION 1

typedef struct {
    int ready;
    PyTypeObject *opened, *window, *replay, *keyring;
    Py_ssize_t opened_sender, opened_seq, opened_key_id, opened_payload, opened_new_session;
    Py_ssize_t window_bits, window_top, window_sender;
    Py_ssize_t replay_fast, replay_mask, replay_width;
    Py_ssize_t keyring_token;
    PyObject *forged;      /* envelope._forged(key_id, sender) -> CryptoError */
    PyObject *invalid_tag; /* cryptography.exceptions.InvalidTag */
    PyObject *decrypt;     /* "decrypt", interned */
    PyObject *one;
} State;

static State state;

#define SLOT(obj, offset) (*(PyObject **)((char *)(obj) + (offset)))

/* Replace a slot's value, taking over the reference to value. */
static inline void
set_slot(PyObject *obj, Py_ssize_t offset, PyObject *value)
{
    PyObject *old = SLOT(obj, offset);
    SLOT(obj, offset) = value;
    Py_XDECREF(old);
}

/* The offset of slot `name` of `type`, or -1 with an exception set. */
static Py_ssize_t
slot_offset(PyTypeObject *type, const char *name)
{
    PyObject *descr = PyDict_GetItemString(type->tp_dict, name);
    if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a __slots__ member", type->tp_name, name);
        return -1;
    }
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX || (member->flags & READONLY)) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a plain object slot", type->tp_name, name);
        return -1;
    }
    return member->offset;
}

static int
take_type(PyObject *obj, PyTypeObject **out)
{
    if (!PyType_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "configure() takes classes");
        return -1;
    }
    Py_INCREF(obj);
    Py_XSETREF(*out, (PyTypeObject *)obj);
    return 0;
}

PyDoc_STRVAR(configure_doc,
"configure(Opened, Window, ReplayWindows, Keyring, forged, InvalidTag)\n\n"
"Tell the module the classes it works with (envelope.py calls it once at import).");

static PyObject *
configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "configure() takes 6 arguments");
        return NULL;
    }
    state.ready = 0;
    if (take_type(args[0], &state.opened) < 0 || take_type(args[1], &state.window) < 0 ||
        take_type(args[2], &state.replay) < 0 || take_type(args[3], &state.keyring) < 0) {
        return NULL;
    }
    struct { PyTypeObject *type; const char *name; Py_ssize_t *offset; } slots[] = {
        {state.opened, "sender", &state.opened_sender},
        {state.opened, "seq", &state.opened_seq},
        {state.opened, "key_id", &state.opened_key_id},
        {state.opened, "payload", &state.opened_payload},
        {state.opened, "new_session", &state.opened_new_session},
        {state.window, "bits", &state.window_bits},
        {state.window, "top", &state.window_top},
        {state.window, "sender", &state.window_sender},
        {state.replay, "_fast", &state.replay_fast},
        {state.replay, "_mask", &state.replay_mask},
        {state.replay, "width", &state.replay_width},
        {state.keyring, "_token", &state.keyring_token},
    };
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) {
        Py_ssize_t offset = slot_offset(slots[i].type, slots[i].name);
        if (offset < 0) {
            return NULL;
        }
        *slots[i].offset = offset;
    }
    Py_INCREF(args[4]);
    Py_XSETREF(state.forged, args[4]);
    Py_INCREF(args[5]);
    Py_XSETREF(state.invalid_tag, args[5]);
    state.ready = 1;
    Py_RETURN_NONE;
}

static inline unsigned long long
read_u64_be(const unsigned char *p)
{
    unsigned long long v = 0;
    for (int i = 0; i < 8; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

/* value << n (left) or value >> n: a new reference, or NULL with an exception set. */
static PyObject *
shift(PyObject *value, unsigned long long n, int left)
{
    PyObject *count = PyLong_FromUnsignedLongLong(n);
    if (count == NULL) {
        return NULL;
    }
    PyObject *shifted = left ? PyNumber_Lshift(value, count) : PyNumber_Rshift(value, count);
    Py_DECREF(count);
    return shifted;
}

/* `op` applied to `a` and `b`, consuming the reference to `a` (NULL passes through). */
static PyObject *
then(PyObject *a, PyObject *(*op)(PyObject *, PyObject *), PyObject *b)
{
    if (a == NULL) {
        return NULL;
    }
    PyObject *result = op(a, b);
    Py_DECREF(a);
    return result;
}

/* Is bit `behind` of the int `bits` set? 1, 0, or -1 with an exception set. */
static int
test_bit(PyObject *bits, unsigned long long behind)
{
    PyObject *shifted = shift(bits, behind, 0);
    if (shifted == NULL) {
        return -1;
    }
    int set = (int)(PyLong_AsUnsignedLongLongMask(shifted) & 1);
    Py_DECREF(shifted);
    return PyErr_Occurred() ? -1 : set;
}

/* The window slid `ahead` places, the new top marked: ((bits << ahead) | 1) & mask. */
static PyObject *
slide(PyObject *bits, unsigned long long ahead, PyObject *mask)
{
    return then(then(shift(bits, ahead, 1), PyNumber_Or, state.one), PyNumber_And, mask);
}

/* A late message inside the window marked as seen: bits | (1 << behind). */
static PyObject *
mark(PyObject *bits, unsigned long long behind)
{
    return then(shift(state.one, behind, 1), PyNumber_Or, bits);
}

static PyObject *
new_opened(PyObject *sender, PyObject *seq, PyObject *key_id, PyObject *payload)
{
    /* Steals seq and payload. */
    PyObject *opened = state.opened->tp_alloc(state.opened, 0);
    if (opened == NULL) {
        Py_DECREF(seq);
        Py_DECREF(payload);
        return NULL;
    }
    Py_INCREF(sender);
    SLOT(opened, state.opened_sender) = sender;
    SLOT(opened, state.opened_seq) = seq;
    Py_INCREF(key_id);
    SLOT(opened, state.opened_key_id) = key_id;
    SLOT(opened, state.opened_payload) = payload;
    SLOT(opened, state.opened_new_session) = Py_NewRef(Py_False);
    return opened;
}

/* The part of open_fast after the entry was found and pinned. */
static PyObject *
open_entry(PyObject *keyring, PyObject *replay, PyObject *entry, const unsigned char *buf,
           Py_ssize_t size, Py_ssize_t head)
{
    PyObject *window = PyTuple_GET_ITEM(entry, 0);
    PyObject *cipher = PyTuple_GET_ITEM(entry, 1);
    PyObject *key_id = PyTuple_GET_ITEM(entry, 2);
    PyObject *token = PyTuple_GET_ITEM(entry, 3);
    if (token != SLOT(keyring, state.keyring_token) || !Py_IS_TYPE(window, state.window)) {
        Py_RETURN_NONE; /* a key was removed since, or a foreign entry: the Python path */
    }
    PyObject *top_obj = SLOT(window, state.window_top);
    PyObject *bits = SLOT(window, state.window_bits);
    PyObject *sender = SLOT(window, state.window_sender);
    PyObject *width_obj = SLOT(replay, state.replay_width);
    if (top_obj == NULL || bits == NULL || sender == NULL || width_obj == NULL ||
        !PyLong_CheckExact(top_obj) || !PyLong_CheckExact(width_obj)) {
        Py_RETURN_NONE;
    }
    unsigned long long top = PyLong_AsUnsignedLongLong(top_obj);
    long width = PyLong_AsLong(width_obj);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    unsigned long long seq = read_u64_be(buf + head - 8);

    /* The replay check comes before decryption and the window changes only once the
     * message has authenticated (RFC 4303 section 3.4.3). Duplicates and messages too old
     * for the window go to the Python path, which says which. */
    int ahead = seq > top;
    unsigned long long distance = ahead ? seq - top : top - seq;
    if (!ahead) {
        if (distance >= (unsigned long long)width) {
            Py_RETURN_NONE;
        }
        int seen = test_bit(bits, distance);
        if (seen != 0) {
            return seen < 0 ? NULL : Py_NewRef(Py_None);
        }
    }

    PyObject *call[4] = {cipher, NULL, NULL, NULL};
    call[1] = PyBytes_FromStringAndSize((const char *)buf + head - 12, 12); /* nonce */
    call[2] = PyBytes_FromStringAndSize((const char *)buf + head, size - head);
    call[3] = PyBytes_FromStringAndSize((const char *)buf, head); /* the header, as AD */
    PyObject *payload = NULL;
    if (call[1] != NULL && call[2] != NULL && call[3] != NULL) {
        payload = PyObject_VectorcallMethod(
            state.decrypt, call, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
    Py_XDECREF(call[1]);
    Py_XDECREF(call[2]);
    Py_XDECREF(call[3]);
    if (payload == NULL) {
        if (PyErr_ExceptionMatches(state.invalid_tag)) {
            PyErr_Clear();
            PyObject *error = PyObject_CallFunctionObjArgs(state.forged, key_id, sender, NULL);
            if (error != NULL) {
                PyErr_SetObject((PyObject *)Py_TYPE(error), error);
                Py_DECREF(error);
            }
        }
        return NULL;
    }

    /* Authentic: record it. The slots are read again, as they were before decryption. */
    bits = SLOT(window, state.window_bits);
    PyObject *updated;
    if (!ahead) {
        updated = mark(bits, distance);
    }
    else if (distance < (unsigned long long)width) {
        updated = slide(bits, distance, SLOT(replay, state.replay_mask));
    }
    else {
        updated = Py_NewRef(state.one);
    }
    PyObject *seq_obj = PyLong_FromUnsignedLongLong(seq);
    if (updated == NULL || seq_obj == NULL) {
        Py_XDECREF(updated);
        Py_XDECREF(seq_obj);
        Py_DECREF(payload);
        return NULL;
    }
    set_slot(window, state.window_bits, updated);
    if (ahead) {
        set_slot(window, state.window_top, Py_NewRef(seq_obj));
    }
    return new_opened(sender, seq_obj, key_id, payload);
}

PyDoc_STRVAR(open_fast_doc,
"open_fast(keyring, data, replay, max_payload) -> Opened | None\n\n"
"unseal's fast path: the Opened of a fresh, authentic message of a known session, or\n"
"None when the Python code must decide. Raises CryptoError (forged) when the message's\n"
"session is known and it fails to authenticate.");

static PyObject *
open_fast(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "open_fast() takes 4 arguments");
        return NULL;
    }
    PyObject *keyring = args[0], *data = args[1], *replay = args[2];
    if (!state.ready || !PyBytes_CheckExact(data) || !Py_IS_TYPE(replay, state.replay) ||
        !Py_IS_TYPE(keyring, state.keyring) || !PyLong_CheckExact(args[3])) {
        Py_RETURN_NONE;
    }
    Py_ssize_t max_payload = PyLong_AsSsize_t(args[3]);
    if (max_payload == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t size = PyBytes_GET_SIZE(data);
    if (size < MIN_SIZE) {
        Py_RETURN_NONE;
    }
    Py_ssize_t head = FIXED + buf[6];
    Py_ssize_t body = size - head - TAG;
    if (buf[0] != VERSION || buf[1] != 0 || body < 0 || body > max_payload) {
        Py_RETURN_NONE; /* malformed, too large, or compressed: the Python path */
    }
    PyObject *fast = SLOT(replay, state.replay_fast);
    if (fast == NULL || !PyDict_CheckExact(fast)) {
        Py_RETURN_NONE;
    }
    PyObject *keyed = PyBytes_FromStringAndSize((const char *)buf + KEYED_START,
                                                head - 8 - KEYED_START);
    if (keyed == NULL) {
        return NULL;
    }
    PyObject *entry = PyDict_GetItemWithError(fast, keyed);
    Py_DECREF(keyed);
    if (entry == NULL) {
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    }
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 4) {
        Py_RETURN_NONE;
    }
    /* Pinned: the decryption may run other threads, which may drop the entry. */
    Py_INCREF(entry);
    PyObject *result = open_entry(keyring, replay, entry, buf, size, head);
    Py_DECREF(entry);
    return result;
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL, configure_doc},
    {"open_fast", (PyCFunction)(void (*)(void))open_fast, METH_FASTCALL, open_fast_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "gossamer.wire._envelope_native",
    .m_doc = "The hot path of gossamer.wire.envelope.unseal, in C (see the source's header).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__envelope_native(void)
{
    state.decrypt = PyUnicode_InternFromString("decrypt");
    state.one = PyLong_FromLong(1);
    if (state.decrypt == NULL || state.one == NULL) {
        return NULL;
    }
    return PyModule_Create(&module_def);
}
