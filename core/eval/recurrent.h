// Private to core/eval: the gated recurrent layers `lstm` and `gru` in ONNX's layout
// (docs/spec/format.md), forward and backpropagation through time, templated on the
// scalar type as kernels.h is.
//
// ONNX's equations (operator LSTM and GRU, default activations: f = sigmoid, g = h = tanh),
// per direction and batch entry, one step per time index taken in the direction's order:
//
//   lstm (gates i, o, f, c):  i = σ(Wi x + Ri h + Wbi + Rbi)   o, f likewise
//                             c~ = tanh(Wc x + Rc h + Wbc + Rbc)
//                             C' = f ⊙ C + i ⊙ c~,   H' = o ⊙ tanh(C')
//   gru (gates z, r, h):      z = σ(Wz x + Rz h + Wbz + Rbz)    r likewise
//                             n = tanh(Wh x + Wbh + Rh (r ⊙ h) + Rbh)          (lbr = 0)
//                             n = tanh(Wh x + Wbh + r ⊙ (Rh h + Rbh))          (lbr = 1)
//                             H' = (1 − z) ⊙ n + z ⊙ h
//
// Never write `auto` for a scalar expression (see kernels.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/eval/kernels.h"

namespace lnv::eval::detail {

template <class T>
struct RecurrentParams {
  bool lstm = true;
  bool linear_before_reset = false;  // gru
  const Tensor<T>* w = nullptr;      // [D, G·H, F]
  const Tensor<T>* r = nullptr;      // [D, G·H, H]
  const Tensor<T>* b = nullptr;      // [D, 2·G·H] or null
  const Tensor<T>* h0 = nullptr;     // [D, N, H] or null (zeros)
  const Tensor<T>* c0 = nullptr;     // [D, N, H] or null (zeros), lstm
};

// The geometry of one node: sizes, the steps of each batch entry, and which output.
struct RecurrentGeom {
  int64_t t = 0, n = 0, f = 0, h = 0, dirs = 1, gates = 4;
  bool reverse_only = false;       // direction "reverse"
  std::vector<int64_t> lens;       // per batch entry
  enum class Out { y, y_h, y_c } out = Out::y;

  int64_t gh() const { return gates * h; }
  bool reversed(int64_t d) const { return reverse_only || d == 1; }
  // The time index of step k (0-based, in processing order) of direction d for entry b.
  int64_t time_of(int64_t d, int64_t b, int64_t k) const { return reversed(d) ? lens[b] - 1 - k : k; }
};

inline RecurrentGeom recurrent_geom(const Node& n, const Shape& x, const Shape& w) {
  RecurrentGeom g;
  g.t = x[0], g.n = x[1], g.f = x[2];
  g.gates = n.op == Op::lstm ? 4 : 3;
  g.dirs = w[0];
  g.h = w[1] / g.gates;
  g.reverse_only = n.direction == "reverse";
  g.lens = n.sequence_lens.empty() ? std::vector<int64_t>(size_t(g.n), g.t) : n.sequence_lens;
  g.out = n.output == "y_h" ? RecurrentGeom::Out::y_h
          : n.output == "y_c" ? RecurrentGeom::Out::y_c
                              : RecurrentGeom::Out::y;
  return g;
}

// Every step's values, kept for the backward pass. Per (direction, batch entry, step k):
// the gate activations (G·H), the hidden state after the step (H), for an lstm the cell
// state after the step (H), for a gru with lbr = 1 the vector Rh h + Rbh (H).
template <class T>
struct RecurrentTrace {
  RecurrentGeom g;
  std::vector<T> gates, hs, cs, hn;

  int64_t slot(int64_t d, int64_t b, int64_t k) const { return (d * g.n + b) * g.t + k; }
  const T* gate(int64_t d, int64_t b, int64_t k) const { return gates.data() + slot(d, b, k) * g.gh(); }
  const T* h_after(int64_t d, int64_t b, int64_t k) const { return hs.data() + slot(d, b, k) * g.h; }
  const T* c_after(int64_t d, int64_t b, int64_t k) const { return cs.data() + slot(d, b, k) * g.h; }
};

// The state before step k (the initial state at k = 0; null: zeros).
template <class T>
const T* state_before(const std::vector<T>& after, const Tensor<T>* init, const RecurrentGeom& g,
                      int64_t d, int64_t b, int64_t k) {
  if (k > 0) return after.data() + ((d * g.n + b) * g.t + k - 1) * g.h;
  return init ? init->data.data() + (d * g.n + b) * g.h : nullptr;
}

template <class T>
RecurrentTrace<T> recurrent_run(const RecurrentGeom& geo, const Tensor<T>& x, const RecurrentParams<T>& p) {
  using std::tanh;
  RecurrentTrace<T> tr;
  tr.g = geo;
  const RecurrentGeom& g = tr.g;
  const int64_t slots = g.dirs * g.n * g.t, gh = g.gh(), H = g.h;
  tr.gates.assign(size_t(slots * gh), T(0));
  tr.hs.assign(size_t(slots * H), T(0));
  if (p.lstm) tr.cs.assign(size_t(slots * H), T(0));
  if (!p.lstm && p.linear_before_reset) tr.hn.assign(size_t(slots * H), T(0));
  std::vector<T> rh(static_cast<size_t>(H));
  for (int64_t d = 0; d < g.dirs; ++d) {
    const T* W = p.w->data.data() + d * gh * g.f;
    const T* R = p.r->data.data() + d * gh * H;
    const T* Wb = p.b ? p.b->data.data() + d * 2 * gh : nullptr;
    const T* Rb = Wb ? Wb + gh : nullptr;
    for (int64_t b = 0; b < g.n; ++b)
      for (int64_t k = 0; k < g.lens[b]; ++k) {
        const T* xt = x.data.data() + (g.time_of(d, b, k) * g.n + b) * g.f;
        const T* hp = state_before(tr.hs, p.h0, g, d, b, k);
        const int64_t s = tr.slot(d, b, k);
        T* a = tr.gates.data() + s * gh;
        T* hout = tr.hs.data() + s * H;
        // Input part of every gate, with Wb; the recurrent part of the gates whose
        // pre-activation is a plain sum (all of an lstm's, a gru's z and r), with Rb.
        const int64_t plain = p.lstm ? gh : 2 * H;
        for (int64_t o = 0; o < gh; ++o) {
          T acc = Wb ? Wb[o] : T(0);
          for (int64_t i = 0; i < g.f; ++i) acc += W[o * g.f + i] * xt[i];
          if (o < plain) {
            if (Rb) acc += Rb[o];
            if (hp)
              for (int64_t i = 0; i < H; ++i) acc += R[o * H + i] * hp[i];
          }
          a[o] = acc;
        }
        if (p.lstm) {
          const T* cp = state_before(tr.cs, p.c0, g, d, b, k);
          T* cout = tr.cs.data() + s * H;
          for (int64_t j = 0; j < H; ++j) {
            T& gi = a[j];
            T& go = a[H + j];
            T& gf = a[2 * H + j];
            T& gc = a[3 * H + j];
            gi = sigmoid_of(gi);
            go = sigmoid_of(go);
            gf = sigmoid_of(gf);
            gc = tanh(gc);
            cout[j] = gi * gc;
            if (cp) cout[j] += gf * cp[j];
            hout[j] = go * tanh(cout[j]);
          }
          continue;
        }
        for (int64_t j = 0; j < 2 * H; ++j) a[j] = sigmoid_of(a[j]);
        const T* Rh = R + 2 * H * H;
        const T* zg = a;
        const T* rg = a + H;
        T* ng = a + 2 * H;
        if (p.linear_before_reset) {
          T* hn = tr.hn.data() + s * H;
          for (int64_t j = 0; j < H; ++j) {
            T acc = Rb ? Rb[2 * H + j] : T(0);
            if (hp)
              for (int64_t i = 0; i < H; ++i) acc += Rh[j * H + i] * hp[i];
            hn[j] = acc;
            ng[j] += rg[j] * acc;
          }
        } else {
          for (int64_t i = 0; i < H; ++i) rh[i] = hp ? T(rg[i] * hp[i]) : T(0);
          for (int64_t j = 0; j < H; ++j) {
            T acc = Rb ? Rb[2 * H + j] : T(0);
            for (int64_t i = 0; i < H; ++i) acc += Rh[j * H + i] * rh[i];
            ng[j] += acc;
          }
        }
        for (int64_t j = 0; j < H; ++j) {
          ng[j] = tanh(ng[j]);
          hout[j] = (T(1) - zg[j]) * ng[j];
          if (hp) hout[j] += zg[j] * hp[j];
        }
      }
  }
  return tr;
}

// The node's output (y, y_h or y_c) from a trace. y is 0 at the time indices past an
// entry's length; y_h and y_c hold the state after the direction's last step.
template <class T>
Tensor<T> recurrent_output(const RecurrentTrace<T>& tr) {
  const RecurrentGeom& g = tr.g;
  if (g.out == RecurrentGeom::Out::y) {
    Tensor<T> y({g.t, g.dirs, g.n, g.h});
    for (int64_t d = 0; d < g.dirs; ++d)
      for (int64_t b = 0; b < g.n; ++b)
        for (int64_t k = 0; k < g.lens[b]; ++k) {
          const T* hk = tr.h_after(d, b, k);
          T* dst = y.data.data() + ((g.time_of(d, b, k) * g.dirs + d) * g.n + b) * g.h;
          std::copy(hk, hk + g.h, dst);
        }
    return y;
  }
  Tensor<T> y({g.dirs, g.n, g.h});
  for (int64_t d = 0; d < g.dirs; ++d)
    for (int64_t b = 0; b < g.n; ++b) {
      const int64_t last = g.lens[b] - 1;
      const T* src = g.out == RecurrentGeom::Out::y_h ? tr.h_after(d, b, last) : tr.c_after(d, b, last);
      std::copy(src, src + g.h, y.data.data() + (d * g.n + b) * g.h);
    }
  return y;
}

template <class T>
struct RecurrentGrads {
  Tensor<T>* dw;   // [D, G·H, F]
  Tensor<T>* dr;   // [D, G·H, H]
  Tensor<T>* db;   // null without bias
  Tensor<T>* dh0;  // null without initial_h
  Tensor<T>* dc0;  // null without initial_c
};

// Backpropagation through time: adds the gradients for `dy` (the selected output's
// cotangent) into dx (if non-null) and the param gradients.
template <class T>
void recurrent_bwd(const RecurrentTrace<T>& tr, const Tensor<T>& x, const RecurrentParams<T>& p,
                   const Tensor<T>& dy, Tensor<T>* dx, const RecurrentGrads<T>& gr) {
  const RecurrentGeom& g = tr.g;
  const int64_t gh = g.gh(), H = g.h;
  const size_t hsz = static_cast<size_t>(H);
  std::vector<T> dh(hsz), dc(hsz), da(static_cast<size_t>(gh)), dhp(hsz), rh(hsz), drh(hsz);
  for (int64_t d = 0; d < g.dirs; ++d) {
    const T* W = p.w->data.data() + d * gh * g.f;
    const T* R = p.r->data.data() + d * gh * H;
    T* dW = gr.dw->data.data() + d * gh * g.f;
    T* dR = gr.dr->data.data() + d * gh * H;
    T* dWb = gr.db ? gr.db->data.data() + d * 2 * gh : nullptr;
    T* dRb = dWb ? dWb + gh : nullptr;
    for (int64_t b = 0; b < g.n; ++b) {
      const int64_t L = g.lens[b];
      std::fill(dh.begin(), dh.end(), T(0));  // the gradient reaching the state after step k
      std::fill(dc.begin(), dc.end(), T(0));
      if (g.out != RecurrentGeom::Out::y) {
        T* dst = g.out == RecurrentGeom::Out::y_h ? dh.data() : dc.data();
        for (int64_t j = 0; j < H; ++j) dst[j] = dy.data[(d * g.n + b) * H + j];
      }
      for (int64_t k = L - 1; k >= 0; --k) {
        const int64_t t = g.time_of(d, b, k);
        if (g.out == RecurrentGeom::Out::y)
          for (int64_t j = 0; j < H; ++j) dh[j] += dy.data[((t * g.dirs + d) * g.n + b) * H + j];
        const T* a = tr.gate(d, b, k);
        const T* hp = state_before(tr.hs, p.h0, g, d, b, k);
        const T* xt = x.data.data() + (t * g.n + b) * g.f;
        std::fill(dhp.begin(), dhp.end(), T(0));
        // da: the gradient of every gate's pre-activation.
        if (p.lstm) {
          using std::tanh;
          const T* c = tr.c_after(d, b, k);
          const T* cp = state_before(tr.cs, p.c0, g, d, b, k);
          for (int64_t j = 0; j < H; ++j) {
            const T& gi = a[j];
            const T& go = a[H + j];
            const T& gf = a[2 * H + j];
            const T& gc = a[3 * H + j];
            const T tc = tanh(c[j]);
            const T dC = dc[j] + dh[j] * go * (T(1) - tc * tc);
            da[j] = dC * gc * gi * (T(1) - gi);
            da[H + j] = dh[j] * tc * go * (T(1) - go);
            da[2 * H + j] = cp ? T(dC * cp[j] * gf * (T(1) - gf)) : T(0);
            da[3 * H + j] = dC * gi * (T(1) - gc * gc);
            dc[j] = dC * gf;  // to the cell state before this step
          }
        } else {
          const T* zg = a;
          const T* rg = a + H;
          const T* ng = a + 2 * H;
          const T* Rh = R + 2 * H * H;
          T* dRh = dR + 2 * H * H;
          for (int64_t j = 0; j < H; ++j) {
            const T hpj = hp ? hp[j] : T(0);
            da[2 * H + j] = dh[j] * (T(1) - zg[j]) * (T(1) - ng[j] * ng[j]);
            da[j] = dh[j] * (hpj - ng[j]) * zg[j] * (T(1) - zg[j]);
            dhp[j] += dh[j] * zg[j];
          }
          if (p.linear_before_reset) {
            const T* hn = tr.hn.data() + tr.slot(d, b, k) * H;
            for (int64_t j = 0; j < H; ++j) {
              const T& dn = da[2 * H + j];
              da[H + j] = dn * hn[j] * rg[j] * (T(1) - rg[j]);
              const T dhn = dn * rg[j];
              if (dRb) dRb[2 * H + j] += dhn;
              if (hp)
                for (int64_t i = 0; i < H; ++i) {
                  dRh[j * H + i] += dhn * hp[i];
                  dhp[i] += dhn * Rh[j * H + i];
                }
            }
          } else {
            for (int64_t i = 0; i < H; ++i) {
              rh[i] = hp ? T(rg[i] * hp[i]) : T(0);
              drh[i] = T(0);
            }
            for (int64_t j = 0; j < H; ++j) {
              const T& dn = da[2 * H + j];
              if (dRb) dRb[2 * H + j] += dn;
              for (int64_t i = 0; i < H; ++i) {
                dRh[j * H + i] += dn * rh[i];
                drh[i] += dn * Rh[j * H + i];
              }
            }
            for (int64_t j = 0; j < H; ++j) {
              const T hpj = hp ? hp[j] : T(0);
              da[H + j] = drh[j] * hpj * rg[j] * (T(1) - rg[j]);
              dhp[j] += drh[j] * rg[j];
            }
          }
        }
        // The plain sums: every gate's input part (and Wb), the recurrent part of the
        // gates whose pre-activation is a plain sum (and Rb).
        const int64_t plain = p.lstm ? gh : 2 * H;
        for (int64_t o = 0; o < gh; ++o) {
          const T& go = da[o];
          if (dWb) dWb[o] += go;
          for (int64_t i = 0; i < g.f; ++i) {
            dW[o * g.f + i] += go * xt[i];
            if (dx) dx->data[(t * g.n + b) * g.f + i] += go * W[o * g.f + i];
          }
          if (o >= plain) continue;
          if (dRb) dRb[o] += go;
          if (hp)
            for (int64_t i = 0; i < H; ++i) {
              dR[o * H + i] += go * hp[i];
              dhp[i] += go * R[o * H + i];
            }
        }
        dh = dhp;
      }
      // What reaches the initial states.
      if (gr.dh0 && L > 0)
        for (int64_t j = 0; j < H; ++j) gr.dh0->data[(d * g.n + b) * H + j] += dh[j];
      if (gr.dc0 && L > 0)
        for (int64_t j = 0; j < H; ++j) gr.dc0->data[(d * g.n + b) * H + j] += dc[j];
    }
  }
}

// The params a gated recurrent node reads, alive as long as this object.
template <class T>
struct RecurrentReads {
  ParamRead<T> w, r, b, h0, c0;
  RecurrentParams<T> params;
  RecurrentReads(const Graph& g, const std::vector<Tensor<T>>& ps, const Node& n)
      : w(read_param(g, ps, n, "weight_ih", n.weight_ih)),
        r(read_param(g, ps, n, "weight_hh", n.weight_hh)),
        b(read_param(g, ps, n, "bias", n.bias)),
        h0(read_param(g, ps, n, "initial_h", n.initial_h)),
        c0(read_param(g, ps, n, "initial_c", n.initial_c)) {
    params.lstm = n.op == Op::lstm;
    params.linear_before_reset = n.linear_before_reset;
    params.w = w.get();
    params.r = r.get();
    params.b = b.get();
    params.h0 = h0.get();
    params.c0 = c0.get();
  }
};

}  // namespace lnv::eval::detail
