// Code generated from capi/include/infokv/session.h by bindings/gen_policies.cmake; DO NOT EDIT.
// (`cmake --build <build> --target go_capi_update` writes it; a test checks that it is current.)

package infokv

import "github.com/infokv/infokv/bindings/go/internal/capi"

// Compression policies.
const (
	PolicyNone      Policy = Policy(capi.IKV_POLICY_NONE)
	PolicyInfoKV    Policy = Policy(capi.IKV_POLICY_INFOKV)
	PolicySnapKV    Policy = Policy(capi.IKV_POLICY_SNAPKV)
	PolicyH2O       Policy = Policy(capi.IKV_POLICY_H2O)
	PolicyStreaming Policy = Policy(capi.IKV_POLICY_STREAMING)
	PolicyTOVA      Policy = Policy(capi.IKV_POLICY_TOVA)
	PolicyPyramidKV Policy = Policy(capi.IKV_POLICY_PYRAMIDKV)
	// PolicyAuto: Chooses per sequence and per layer which evidence ranks the tokens and how the budget is spread across layers (packaging/docs/quality.md "Choosing what to keep: auto"); with max_loss > 0 it needs no budget. Asked for a later question under a byte budget (ikv_seq_compress with the default question), it reads the context replay as IKV_POLICY_KVZIP does, and the probe (packaging/docs/c_api.md "Which question").
	PolicyAuto Policy = Policy(capi.IKV_POLICY_AUTO)
	// PolicyKVzip: KVzip's context replay: a token's score is the most attention any head gives it while the model re-reads the context after a "repeat the previous context" prompt, and the blocks a uniform budget would hold go to the layers whose tokens rank highest across all layers (some layers keep many tokens, others one block). Made for a cache that is asked something later (a chat's history, a saved snapshot); each compression costs one more pass over the sequence's tokens (packaging/docs/c_api.md "Which question").
	PolicyKVzip Policy = Policy(capi.IKV_POLICY_KVZIP)
)

var policyNames = map[Policy]string{
	PolicyNone:      "none",
	PolicyInfoKV:    "infokv",
	PolicySnapKV:    "snapkv",
	PolicyH2O:       "h2o",
	PolicyStreaming: "streaming",
	PolicyTOVA:      "tova",
	PolicyPyramidKV: "pyramidkv",
	PolicyAuto:      "auto",
	PolicyKVzip:     "kvzip",
}
