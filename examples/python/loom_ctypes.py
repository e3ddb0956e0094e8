"""A ctypes binding of loom's C API (capi/loom.h): no compiled extension needed.

    import loom_ctypes as loom
    lib = loom.Library("build/src/libloom.so")
    model = lib.load_model("path/to/model")
    session = model.session(context_length=512)
    sampler = lib.sampler(temperature=0.8, seed=7)
    text, result = session.generate(sampler, "Once upon a time", max_tokens=32,
                                     on_text=lambda piece: print(piece, end=""))
    vector = session.embed(model.tokenizer().encode("a sentence"), normalize=True)

Handles are freed when the Python objects are garbage collected (or by close()).
Errors raise LoomError with the library's status name and full message.
"""

import ctypes
from ctypes import (CFUNCTYPE, POINTER, Structure, byref, c_char_p, c_double, c_float,
                    c_int, c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p)

LOOM_OK = 0
LOOM_ERR_BUFFER_TOO_SMALL = 13
LOOM_ERR_TEMPLATE = 14
LOOM_ERR_KV_POOL_FULL = 15
TOKENIZE_ADD_SPECIAL = 1
TOKENIZE_PARSE_SPECIAL = 2
POOL_MEAN, POOL_LAST = 0, 1
STOP_REASONS = {0: "eos", 1: "stop_string", 2: "max_tokens", 3: "cancelled", 4: "context_full"}

PROGRESS_FN = CFUNCTYPE(c_int, c_void_p, c_float, c_char_p)
LOG_FN = CFUNCTYPE(None, c_void_p, c_int32, c_char_p)
TEXT_FN = CFUNCTYPE(c_int32, c_void_p, POINTER(ctypes.c_char), c_size_t, c_int32)
TRACE_FN = CFUNCTYPE(c_int32, c_void_p, c_char_p, c_int32, c_int64, c_int64, POINTER(c_float))


class LoadParams(Structure):
    _fields_ = [("struct_size", c_uint32), ("io_mode", c_int32), ("target_dtype", c_int32),
                ("strict", c_int32), ("n_threads", c_int32), ("load_tokenizer", c_int32),
                ("progress", PROGRESS_FN), ("progress_user", c_void_p), ("log", LOG_FN),
                ("log_user", c_void_p), ("log_level", c_int32)]


class SessionParams(Structure):
    _fields_ = [("struct_size", c_uint32), ("context_length", c_int32), ("n_threads", c_int32),
                ("kv_dtype", c_int32), ("all_logits", c_int32),
                # appended: the forward-pass trace (the *_init_sized calls below pass
                # ctypes.sizeof, so a mirror without these fields would stay safe)
                ("trace", TRACE_FN), ("trace_user", c_void_p)]


class SamplerParams(Structure):
    _fields_ = [("struct_size", c_uint32), ("temperature", c_float), ("top_k", c_int32),
                ("top_p", c_float), ("min_p", c_float), ("repeat_penalty", c_float),
                ("frequency_penalty", c_float), ("presence_penalty", c_float),
                ("penalty_last_n", c_int32), ("seed", c_uint64),
                ("logit_bias_ids", POINTER(c_int32)), ("logit_bias_values", POINTER(c_float)),
                ("n_logit_bias", c_size_t)]


class GenerateParams(Structure):
    _fields_ = [("struct_size", c_uint32), ("max_tokens", c_int32),
                ("stop_strings", POINTER(c_char_p)), ("n_stop_strings", c_size_t),
                ("tokenize_flags", c_uint32), ("continue_session", c_int32),
                ("on_text", TEXT_FN), ("user", c_void_p)]


class GenerateResult(Structure):
    _fields_ = [("struct_size", c_uint32), ("prompt_tokens", c_int32),
                ("generated_tokens", c_int32), ("stop_reason", c_int32),
                ("prompt_seconds", c_double), ("generate_seconds", c_double)]


class ModelInfo(Structure):
    _fields_ = [("struct_size", c_uint32), ("vocab_size", c_int32), ("context_length", c_int32),
                ("hidden_size", c_int32), ("n_layers", c_int32), ("n_heads", c_int32),
                ("n_kv_heads", c_int32), ("head_dim", c_int32), ("bos_id", c_int32),
                ("eos_id", c_int32), ("has_tokenizer", c_int32), ("architecture", c_char_p),
                ("weight_bytes", c_int64)]


class LoomError(RuntimeError):
    def __init__(self, status, name, message):
        super().__init__(f"{name}: {message}")
        self.status = status
        self.name = name


class Library:
    """The loaded shared library and its function prototypes."""

    def __init__(self, path):
        lib = ctypes.CDLL(path)
        self.lib = lib
        P = c_void_p
        sig = {
            "loom_version_number": (c_int32, []),
            "loom_version_string": (c_char_p, []),
            "loom_status_str": (c_char_p, [c_int32]),
            "loom_error_message": (c_char_p, [P]),
            "loom_error_free": (None, [P]),
            "loom_load_params_init_sized": (None, [POINTER(LoadParams), c_size_t]),
            "loom_model_load": (c_int32, [c_char_p, POINTER(LoadParams), POINTER(P), POINTER(P)]),
            "loom_model_free": (None, [P]),
            "loom_model_info_init_sized": (None, [POINTER(ModelInfo), c_size_t]),
            "loom_model_get_info": (c_int32, [P, POINTER(ModelInfo)]),
            "loom_model_load_report": (c_int32, [P, c_int32, c_char_p, c_size_t, POINTER(c_size_t)]),
            "loom_model_tokenizer": (c_int32, [P, POINTER(P), POINTER(P)]),
            "loom_tokenizer_load": (c_int32, [c_char_p, POINTER(P), POINTER(P)]),
            "loom_tokenizer_free": (None, [P]),
            "loom_tokenize": (c_int32, [P, c_char_p, c_size_t, c_uint32, POINTER(c_int32), c_size_t,
                                        POINTER(c_size_t), POINTER(P)]),
            "loom_detokenize": (c_int32, [P, POINTER(c_int32), c_size_t, c_uint32, c_char_p, c_size_t,
                                          POINTER(c_size_t), POINTER(P)]),
            "loom_session_params_init_sized": (None, [POINTER(SessionParams), c_size_t]),
            "loom_session_create": (c_int32, [P, POINTER(SessionParams), POINTER(P), POINTER(P)]),
            "loom_session_free": (None, [P]),
            "loom_prefill": (c_int32, [P, POINTER(c_int32), c_size_t, POINTER(P)]),
            "loom_step": (c_int32, [P, c_int32, POINTER(P)]),
            "loom_logits": (POINTER(c_float), [P, POINTER(c_size_t)]),
            "loom_sampler_params_init_sized": (None, [POINTER(SamplerParams), c_size_t]),
            "loom_sampler_create": (c_int32, [POINTER(SamplerParams), POINTER(P), POINTER(P)]),
            "loom_sampler_free": (None, [P]),
            "loom_sample": (c_int32, [P, P, POINTER(c_int32), POINTER(P)]),
            "loom_generate_params_init_sized": (None, [POINTER(GenerateParams), c_size_t]),
            "loom_generate_result_init_sized": (None, [POINTER(GenerateResult), c_size_t]),
            "loom_generate": (c_int32, [P, P, c_char_p, c_size_t, POINTER(GenerateParams),
                                        POINTER(GenerateResult), POINTER(P)]),
            "loom_embed": (c_int32, [P, POINTER(c_int32), c_size_t, c_int32, c_int32, POINTER(c_float),
                                     c_size_t, POINTER(c_size_t), POINTER(P)]),
        }
        for name, (restype, argtypes) in sig.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        self.version = lib.loom_version_string().decode()

    def check(self, status, err):
        if status == LOOM_OK:
            return
        message = ""
        if err.value:
            message = self.lib.loom_error_message(err).decode(errors="replace")
            self.lib.loom_error_free(err)
        raise LoomError(status, self.lib.loom_status_str(status).decode(), message)

    def load_model(self, path, log_level=3):
        params = LoadParams()
        self.lib.loom_load_params_init_sized(byref(params), ctypes.sizeof(params))
        params.log_level = log_level
        handle, err = c_void_p(), c_void_p()
        self.check(self.lib.loom_model_load(path.encode(), byref(params), byref(handle), byref(err)), err)
        return Model(self, handle)

    def load_tokenizer(self, path):
        handle, err = c_void_p(), c_void_p()
        self.check(self.lib.loom_tokenizer_load(path.encode(), byref(handle), byref(err)), err)
        return Tokenizer(self, handle)

    def sampler(self, **fields):
        params = SamplerParams()
        self.lib.loom_sampler_params_init_sized(byref(params), ctypes.sizeof(params))
        for key, value in fields.items():
            setattr(params, key, value)
        handle, err = c_void_p(), c_void_p()
        self.check(self.lib.loom_sampler_create(byref(params), byref(handle), byref(err)), err)
        return Handle(self, handle, self.lib.loom_sampler_free)


class Handle:
    def __init__(self, library, handle, free):
        self.library, self.handle, self._free = library, handle, free

    def close(self):
        if self.handle:
            self._free(self.handle)
            self.handle = None

    def __del__(self):
        self.close()


class Model(Handle):
    def __init__(self, library, handle):
        super().__init__(library, handle, library.lib.loom_model_free)

    def info(self):
        info = ModelInfo()
        self.library.lib.loom_model_info_init_sized(byref(info), ctypes.sizeof(info))
        self.library.check(self.library.lib.loom_model_get_info(self.handle, byref(info)), c_void_p())
        return info

    def load_report(self, trace=False):
        n = c_size_t()
        lib = self.library.lib
        self.library.check(lib.loom_model_load_report(self.handle, int(trace), None, 0, byref(n)), c_void_p())
        buf = ctypes.create_string_buffer(n.value + 1)
        self.library.check(lib.loom_model_load_report(self.handle, int(trace), buf, len(buf), byref(n)), c_void_p())
        return buf.value.decode()

    def tokenizer(self):
        handle, err = c_void_p(), c_void_p()
        self.library.check(self.library.lib.loom_model_tokenizer(self.handle, byref(handle), byref(err)), err)
        return Tokenizer(self.library, handle)

    def session(self, context_length=0, n_threads=0):
        params = SessionParams()
        self.library.lib.loom_session_params_init_sized(byref(params), ctypes.sizeof(params))
        params.context_length = context_length
        params.n_threads = n_threads
        handle, err = c_void_p(), c_void_p()
        self.library.check(self.library.lib.loom_session_create(self.handle, byref(params), byref(handle),
                                                                byref(err)), err)
        return Session(self.library, handle, self)


class Tokenizer(Handle):
    def __init__(self, library, handle):
        super().__init__(library, handle, library.lib.loom_tokenizer_free)

    def encode(self, text, add_special=True):
        data = text.encode()
        flags = TOKENIZE_ADD_SPECIAL if add_special else 0
        n, err = c_size_t(), c_void_p()
        lib = self.library.lib
        self.library.check(lib.loom_tokenize(self.handle, data, len(data), flags, None, 0, byref(n), byref(err)), err)
        ids = (c_int32 * n.value)()
        self.library.check(lib.loom_tokenize(self.handle, data, len(data), flags, ids, n.value, byref(n),
                                             byref(err)), err)
        return list(ids)

    def decode(self, ids):
        arr = (c_int32 * len(ids))(*ids)
        n, err = c_size_t(), c_void_p()
        lib = self.library.lib
        self.library.check(lib.loom_detokenize(self.handle, arr, len(ids), 0, None, 0, byref(n), byref(err)), err)
        buf = ctypes.create_string_buffer(n.value + 1)
        self.library.check(lib.loom_detokenize(self.handle, arr, len(ids), 0, buf, len(buf), byref(n),
                                               byref(err)), err)
        return buf.raw[:n.value].decode(errors="replace")


class Session(Handle):
    def __init__(self, library, handle, model):
        super().__init__(library, handle, library.lib.loom_session_free)
        self.model = model  # keeps the model handle alive as long as the session

    def generate(self, sampler, prompt, max_tokens=64, stop=(), on_text=None):
        lib = self.library.lib
        params = GenerateParams()
        lib.loom_generate_params_init_sized(byref(params), ctypes.sizeof(params))
        params.max_tokens = max_tokens
        stops = (c_char_p * len(stop))(*[s.encode() for s in stop])
        params.stop_strings = stops
        params.n_stop_strings = len(stop)
        pieces = []

        def callback(_user, text, length, _token):
            piece = ctypes.string_at(text, length).decode(errors="replace")
            pieces.append(piece)
            if on_text is not None:
                on_text(piece)
            return 1

        params.on_text = TEXT_FN(callback)
        result = GenerateResult()
        lib.loom_generate_result_init_sized(byref(result), ctypes.sizeof(result))
        data = prompt.encode()
        err = c_void_p()
        self.library.check(lib.loom_generate(self.handle, sampler.handle, data, len(data), byref(params),
                                             byref(result), byref(err)), err)
        return "".join(pieces), result

    def embed(self, tokens, pooling=POOL_MEAN, normalize=True):
        lib = self.library.lib
        arr = (c_int32 * len(tokens))(*tokens)
        dim, err = c_size_t(), c_void_p()
        self.library.check(lib.loom_embed(self.handle, arr, len(tokens), pooling, int(normalize), None, 0,
                                          byref(dim), byref(err)), err)
        out = (c_float * dim.value)()
        self.library.check(lib.loom_embed(self.handle, arr, len(tokens), pooling, int(normalize), out,
                                          dim.value, byref(dim), byref(err)), err)
        return list(out)
