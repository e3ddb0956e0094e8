// The register tiles of matvec_x86.cpp, written once and included once per ISA level,
// inside namespace LOOM_TILE_NS, with functions carrying LOOM_TILE_TARGET and vector
// operations from the struct LOOM_TILE_ISA (lanes, chains, tile sizes, load/fma/hsum).
// The summation order every tile follows is described at the top of matvec_x86.cpp; a
// tile of R weight rows x T tokens applies exactly that order to each of its R*T
// outputs, so R and T are free choices of speed, never of bits.
//
// No include guard: included twice on purpose.

namespace LOOM_TILE_NS {

using Isa = LOOM_TILE_ISA;
using Vec = Isa::V;
constexpr int64_t kV = Isa::kLanes;
constexpr int kC = Isa::kChains;
constexpr int64_t kStep = kC * kV;
static_assert(kC == 1 || kC == 2 || kC == 4, "chains: 1, 2 or 4");

// R rows (ws apart) against T tokens, columns [c0, c1) of the whole steps (chunk j of
// each step of kStep columns goes into chain j); when c1 == full, also the columns
// after the whole steps and the sums into y[t * ys + r * yr]. `state` (R x T x kC x kV
// floats, null when the row is done in one go) keeps the accumulators between column
// blocks, which changes no bit.
//
// One function body on purpose: with the accumulators passed by reference to helpers,
// GCC 12 kept them in memory. The T token vectors of a chunk are loaded once for all R
// rows, each weight vector once (and widened once) for all T tokens; with several rows
// the token vectors are pinned in registers (an empty asm), because GCC otherwise folds
// their loads into every row's FMA (R*T loads per chunk instead of R + T).
template <typename L, int R, int T>
LOOM_TILE_TARGET inline void group(const typename L::T* w, int64_t ws, const float* x, int64_t xs,
                                   float* y, int64_t ys, int64_t yr, int64_t cols, int64_t c0,
                                   int64_t c1, int64_t full, float* state, int64_t ahead = 0) {
  // The T token vectors and R*T accumulators of a chunk do not fit the registers
  // together (3 rows x 8 tokens: 24 + 8 + 1 of 32 zmm): then the R weight vectors are
  // held instead and each token vector is loaded once for its R products.
  constexpr bool kWeightsFirst = R * T * kC + T + 1 > Isa::kRegisters;
  Vec acc[R][T][kC];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      for (int j = 0; j < kC; ++j) {
        acc[r][t][j] = state == nullptr || c0 == 0 ? Isa::zero() : Isa::load(state + ((r * T + t) * kC + j) * kV);
      }
    }
  }
  for (int64_t c = c0; c < c1; c += kStep) {
    if (ahead != 0) {
      // A GEMM tile's prefetch fills L2, the matvec's L1 (see Avx512Isa::kGemmAheadBytes).
      constexpr auto kHint = T > 1 ? _MM_HINT_T1 : _MM_HINT_T0;
      for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(w + r * ws + c + ahead), kHint);
    }
    for (int j = 0; j < kC; ++j) {
      if constexpr (kWeightsFirst) {
        Vec wv[R];
        for (int r = 0; r < R; ++r) {
          wv[r] = L::load(w + r * ws + c + j * kV);
          asm("" : "+v"(wv[r]));
        }
        for (int t = 0; t < T; ++t) {
          Vec xv = Isa::load(x + t * xs + c + j * kV);
          asm("" : "+v"(xv));
          for (int r = 0; r < R; ++r) acc[r][t][j] = Isa::fma(wv[r], xv, acc[r][t][j]);
        }
      } else {
        Vec xv[T];
        for (int t = 0; t < T; ++t) {
          xv[t] = Isa::load(x + t * xs + c + j * kV);
          if constexpr (R > 1) asm("" : "+v"(xv[t]));
        }
        for (int r = 0; r < R; ++r) {
          const Vec wv = L::load(w + r * ws + c + j * kV);
          for (int t = 0; t < T; ++t) acc[r][t][j] = Isa::fma(wv, xv[t], acc[r][t][j]);
        }
      }
    }
  }
  if (state != nullptr && c1 != full) {
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) {
        for (int j = 0; j < kC; ++j) Isa::store(state + ((r * T + t) * kC + j) * kV, acc[r][t][j]);
      }
    }
    return;
  }
  // The columns after the whole steps: each remaining whole chunk into chain 0, then the
  // last cols % kV columns, zero-filled, into chain 1 (chain 0 when there is one); then
  // each output's chains are added pairwise in a fixed tree and summed across lanes.
  // (Fixed chain indices keep the accumulators in registers.)
  constexpr int kTailChain = kC > 1 ? 1 : 0;
  int64_t c = full;
  for (; c + kV <= cols; c += kV) {
    Vec xv[T];
    for (int t = 0; t < T; ++t) xv[t] = Isa::load(x + t * xs + c);
    for (int r = 0; r < R; ++r) {
      const Vec wv = L::load(w + r * ws + c);
      for (int t = 0; t < T; ++t) acc[r][t][0] = Isa::fma(wv, xv[t], acc[r][t][0]);
    }
  }
  if (c < cols) {
    const int64_t n = cols - c;
    Vec xv[T];
    for (int t = 0; t < T; ++t) xv[t] = Isa::load_tail(x + t * xs + c, n);
    for (int r = 0; r < R; ++r) {
      const Vec wv = L::load_tail(w + r * ws + c, n);
      for (int t = 0; t < T; ++t) {
        acc[r][t][kTailChain] = Isa::fma(wv, xv[t], acc[r][t][kTailChain]);
      }
    }
  }
  if constexpr (kC == 1 && R * T >= 8) {
    // Many outputs: their horizontal sums sixteen at a time (simd::hsum512_x16, the same
    // adds in the same pairs as hsum512, with a third of the shuffles). One chain per
    // output is the AVX-512 level only; v's bound names T, which makes its type (and the
    // call) dependent, checked only where this branch is instantiated.
    constexpr int kN = R * T;
    Vec v[16 + 0 * T];
    float sums[16];
    for (int b = 0; b < kN; b += 16) {
      for (int i = 0; i < 16; ++i) v[i] = b + i < kN ? acc[(b + i) / T][(b + i) % T][0] : Isa::zero();
      simd::hsum512_x16(v, sums);
      for (int i = 0; i < 16 && b + i < kN; ++i) {
        const int o = b + i;
        y[(o % T) * ys + (o / T) * yr] = sums[i];
      }
    }
    return;
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      const Vec* a = acc[r][t];
      Vec s;
      if constexpr (kC == 1) {
        s = a[0];
      } else if constexpr (kC == 2) {
        s = Isa::add(a[0], a[1]);
      } else {
        s = Isa::add(Isa::add(a[0], a[1]), Isa::add(a[2], a[3]));
      }
      y[t * ys + r * yr] = Isa::hsum(s);
    }
  }
}

// Software prefetch of a call to rows(): [begin, end) are bytes to pull into L2 while
// the tile works (the GEMM's next block of weight rows, Isa::kPrefetchNextBlock), spread
// over its row groups so the reads overlap the FMAs; `ahead` is how far ahead of its
// loads each weight row stream prefetches (Isa::kGemmAheadBytes, Isa::matvec_ahead).
struct Prefetch {
  const char* begin = nullptr;
  const char* end = nullptr;
  int64_t ahead = 0;  // elements ahead in each weight row stream to prefetch (0: none)
};

// Rows [0, n_rows) against tokens [0, T): y[t * ys + r]. Rows go R at a time, group i
// taking row i of each of R equal parts of the rows (the last n_rows % R one at a time):
// R streams far apart. With one chain per output (kC == 1) a row alone is one dependent
// FMA chain, so decode too needs several rows side by side, and adjacent rows side by
// side ran at half the rate of either (AMD Zen 5, owned and mapped memory: the
// prefetchers lose track of interleaved neighbouring rows), while distant ones beat one
// row with four chains. A row's whole steps run in one go when the T token rows of a
// column block fit in Isa::kColumnBlockBytes (or `state` is null), else in column blocks
// of balanced lengths, every row visiting a column block before the next one so the
// token rows stay in cache; `state` (n_rows x T x kC x kV floats) holds the
// accumulators in between.
template <typename L, int R, int T>
LOOM_TILE_TARGET void rows(const typename L::T* w, int64_t ws, const float* x, int64_t xs, float* y,
                           int64_t ys, int64_t n_rows, int64_t cols, float* state,
                           Prefetch prefetch = {}) {
  constexpr int64_t kMaxBlock = std::max<int64_t>(kStep, Isa::kColumnBlockBytes / (T * 4) / kStep * kStep);
  constexpr int64_t kPerRow = T * kC * kV;
  constexpr int64_t kLine = 64;
  const int64_t full = cols / kStep * kStep;
  const bool blocked = full > kMaxBlock && state != nullptr;
  // Column blocks of balanced lengths (whole steps), none longer than kMaxBlock.
  const int64_t n_blocks = blocked ? (full + kMaxBlock - 1) / kMaxBlock : 1;
  const int64_t kBlock = (full / kStep + n_blocks - 1) / n_blocks * kStep;
  const int64_t visits = n_blocks * (n_rows / R + n_rows % R);
  const int64_t lines = (prefetch.end - prefetch.begin + kLine - 1) / kLine;
  const int64_t lines_per_visit = visits > 0 ? (lines + visits - 1) / visits : 0;
  const char* next = prefetch.begin;
  auto pull = [&] {
    for (int64_t i = 0; i < lines_per_visit && next < prefetch.end; ++i, next += kLine) {
      _mm_prefetch(next, _MM_HINT_T1);
    }
  };
  for (int64_t c0 = 0;; c0 += kBlock) {
    const int64_t c1 = blocked ? std::min(full, c0 + kBlock) : full;
    const int64_t part = n_rows / R;
    for (int64_t i = 0; i < part; ++i) {
      pull();
      group<L, R, T>(w + i * ws, part * ws, x, xs, y + i, ys, part, cols, c0, c1, full,
                     blocked ? state + i * R * kPerRow : nullptr, prefetch.ahead);
    }
    for (int64_t r = part * R; r < n_rows; ++r) {
      pull();
      group<L, 1, T>(w + r * ws, ws, x, xs, y + r, ys, 1, cols, c0, c1, full,
                     blocked ? state + r * kPerRow : nullptr, prefetch.ahead);
    }
    if (c1 == full) break;
  }
}

// Decode: every row against one token, each row whole, Isa::kMatvecRows rows side by
// side (see rows()).
template <typename L>
void matvec(const typename L::T* w, int64_t ws, const float* x, float* y, int64_t n_rows,
            int64_t cols) {
  rows<L, Isa::kMatvecRows, 1>(w, ws, x, 0, y, 0, n_rows, cols, nullptr,
                               {.ahead = Isa::matvec_ahead(static_cast<int64_t>(sizeof(typename L::T)))});
}

// Rows against a tile of 1..kGemmTokens tokens, through a table (T must be a
// compile-time constant).
template <typename L, int... I>
void rows_any(int width, const typename L::T* w, int64_t ws, const float* x, int64_t xs, float* y,
              int64_t ys, int64_t n_rows, int64_t cols, float* state, Prefetch prefetch,
              std::integer_sequence<int, I...>) {
  using Fn = void (*)(const typename L::T*, int64_t, const float*, int64_t, float*, int64_t,
                      int64_t, int64_t, float*, Prefetch);
  static constexpr Fn kFns[] = {&rows<L, Isa::gemm_rows(I + 1), I + 1>...};
  kFns[width - 1](w, ws, x, xs, y, ys, n_rows, cols, state, prefetch);
}

// Many tokens: blocks of about Isa::kBlockBytes of weight rows, kept in L2 while every
// token tile passes over them. The tokens go in ceil(n / kGemmTokens) tiles of balanced
// widths (8 tokens on AVX-512: 4 + 4, not 6 + 2, whose narrow tile ran at a third of the
// wide one's rate). With Isa::kPrefetchNextBlock, while the tiles of one block run, the
// next block is prefetched into L2, a share per tile: on Zen 3 (AVX2) the first tile of
// each block otherwise waited on memory (it needs the weights faster than one core's
// share of the bus gives them, and for column-blocked long rows it read them in short
// strided runs the hardware prefetchers do not follow), and a batch of 8 tokens ran at
// half its in-cache rate. On Zen 5 (AVX-512) it gained nothing and its prefetch
// instructions stalled on full fill buffers.
template <typename L>
void gemm(const typename L::T* w, int64_t ws, const float* x, int64_t xs, int64_t n_tokens,
          float* y, int64_t ys, int64_t n_rows, int64_t cols) {
  constexpr int kT = Isa::kGemmTokens;
  using E = typename L::T;
  constexpr int64_t kAhead = Isa::kGemmAheadBytes / static_cast<int64_t>(sizeof(E));
  const int64_t tiles = (n_tokens + kT - 1) / kT;
  const int64_t narrow = n_tokens / tiles;    // every tile is `narrow` or narrow + 1 wide,
  const int64_t wide = n_tokens % tiles;      // the first `wide` ones narrow + 1
  // f32 weights (4 bytes each, the most memory per FMA) up to Isa::kOneTileTokens tokens
  // in one tile of fewer rows read each weight once: 3 x 7..9 on AVX-512, at 9 tokens 27
  // accumulators + 3 weights + 1 token vector (a speculative round with the default 8
  // drafts verifies 9 tokens; as 5 + 4 over blocks that pass cost 1.3-1.4x the 8-token
  // one, now about 1.05x). f16 / bf16 ran slower that way than as two tiles over L2
  // blocks (loom_linear_bench 4096 x 4096, 8 tokens, alternating: f32 1944-2030 against
  // 2364-2394 us at 2 threads, 4094-4208 against 5018-5073 at 1; f16 batched decode at
  // B = 8 401-497 against 628-690 tokens/s).
  constexpr int kWhole = sizeof(E) == 4 ? std::max(kT, Isa::kOneTileTokens) : kT;
  if (Isa::kOneTileWhole && n_tokens <= kWhole) {
    // One token tile (speculative verification, small batches) reads each weight once
    // whatever the blocking: its rows run as in decode, over the whole range, without
    // row or column blocks. loom bench --batch 4 on the small f32 GGUF (one tile of 4),
    // alternating: 201-214 -> 202-227 tokens/s. (The same row-outer order for two tiles,
    // 8 tokens, measured slower than the blocks below: 521-560 against 573-581, f16.)
    rows_any<L>(static_cast<int>(n_tokens), w, ws, x, xs, y, ys, n_rows, cols, nullptr, {.ahead = kAhead},
                std::make_integer_sequence<int, kWhole>{});
    return;
  }
  const int64_t block = block_rows(Isa::kBlockBytes, cols, static_cast<int64_t>(sizeof(E)), Isa::gemm_rows(kT));
  thread_local std::vector<float> state;
  state.resize(static_cast<size_t>(std::min(block, n_rows) * kT * kC * kV));
  for (int64_t r0 = 0; r0 < n_rows; r0 += block) {
    const int64_t nr = std::min(block, n_rows - r0);
    const E* wb = w + r0 * ws;
    // The next block's bytes, split in `tiles` shares.
    const auto* next_begin = reinterpret_cast<const char*>(wb + nr * ws);
    const auto* next_end = reinterpret_cast<const char*>(w + std::min(n_rows, r0 + nr + block) * ws);
    const int64_t share = (next_end - next_begin + tiles - 1) / tiles;
    auto share_of = [&](int64_t tile) {
      if constexpr (!Isa::kPrefetchNextBlock) return Prefetch{.ahead = tile == 0 ? kAhead : 0};
      const char* b = next_begin + std::min<int64_t>(next_end - next_begin, tile * share);
      return Prefetch{b, std::min(next_end, b + share)};
    };
    int64_t t0 = 0;
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const int64_t width = narrow + (tile < wide ? 1 : 0);
      rows_any<L>(static_cast<int>(width), wb, ws, x + t0 * xs, xs, y + t0 * ys + r0, ys, nr, cols,
                  state.data(), share_of(tile), std::make_integer_sequence<int, kT>{});
      t0 += width;
    }
  }
}

}  // namespace LOOM_TILE_NS
