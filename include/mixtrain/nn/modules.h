// mixtrain/nn/modules.h: every module header (mt::nn::Module and the layers, init).
#pragma once

#include "mixtrain/nn/activation.h"
#include "mixtrain/nn/attention.h"
#include "mixtrain/nn/batch_norm.h"
#include "mixtrain/nn/container.h"
#include "mixtrain/nn/conv.h"
#include "mixtrain/nn/dropout.h"
#include "mixtrain/nn/embedding.h"
#include "mixtrain/nn/flatten.h"
#include "mixtrain/nn/gpt.h"
#include "mixtrain/nn/init.h"
#include "mixtrain/nn/linear.h"
#include "mixtrain/nn/module.h"
#include "mixtrain/nn/normalization.h"
#include "mixtrain/nn/pooling.h"
#include "mixtrain/nn/size2.h"
#include "mixtrain/nn/transformer.h"
