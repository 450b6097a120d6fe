// src/models/model_size.h — refusing, before anything is allocated, a model whose weights alone could
// not fit in this machine's memory (a layer count or width typed wrong, a corrupt config), with a message
// naming the sizes instead of an allocation failure halfway through building it. Internal.
#pragma once

#include <string>

#include "tfm/modules/transformer.h"

namespace tfm {

// Throws std::invalid_argument("<sizes> make a model of at least N parameters ...") when `layers` layers of `o` (one,
// with o.share_layers) plus `extra` further parameters (embedding and position tables) hold more float32 weights than
// the machine's physical memory. The count is a lower bound, each layer's two FFN matrices (2 · d_model ·
// dim_feedforward) and one attention's projections (d_model · nhead · 2·(Dh + Dv)), so no model that fits is refused;
// `sizes` names the keys behind it.
void check_model_fits(const LayerOptions& o, long double layers, long double extra, const std::string& sizes);
// ", head_dim N, v_head_dim M" for the widths a variant sets (for `sizes`), else "".
std::string head_widths(const AttentionVariant& a);

}  // namespace tfm
