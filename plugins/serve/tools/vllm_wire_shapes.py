"""Write vLLM's OpenAI-server JSON for fixed inputs, built with vLLM's own response classes and
serialised the way its serving code does (vLLM 0.32: ``vllm/entrypoints/openai/completion/
serving.py``, ``chat_completion/serving.py``, ``serve/engine/protocol.py``).

Run in a venv with vLLM installed (docs/serve.md); the output is the test data that pins the
server's bytes (``plugins/serve/tests/data/vllm_wire.json``):

    python plugins/serve/tools/vllm_wire_shapes.py > plugins/serve/tests/data/vllm_wire.json
"""

import json

from vllm.entrypoints.generate.base.protocol import DeltaMessage
from vllm.entrypoints.openai.chat_completion.protocol import (
    ChatCompletionResponse,
    ChatCompletionResponseChoice,
    ChatCompletionResponseStreamChoice,
    ChatCompletionStreamResponse,
    ChatMessage,
)
from vllm.entrypoints.openai.completion.protocol import (
    CompletionResponse,
    CompletionResponseChoice,
    CompletionResponseStreamChoice,
    CompletionStreamResponse,
)
from vllm.entrypoints.serve.engine.protocol import (
    ErrorInfo,
    ErrorResponse,
    ModelCard,
    ModelList,
    ModelPermission,
    PromptTokenUsageInfo,
    UsageInfo,
)

ID, CREATED, MODEL = "ID", 1700000000, "servesim"
out = {}


def usage(p, c, cached=None):
    u = UsageInfo(prompt_tokens=p, completion_tokens=c, total_tokens=p + c)
    if cached is not None:
        u.prompt_tokens_details = PromptTokenUsageInfo(cached_tokens=cached)
    return u


chunk = CompletionStreamResponse(id=ID, object="text_completion", created=CREATED, model=MODEL,
    choices=[CompletionResponseStreamChoice(index=0, text=" w1", logprobs=None, finish_reason=None,
                                            stop_reason=None, prompt_token_ids=None, token_ids=None)])
out["completion_chunk"] = json.loads(chunk.model_dump_json(exclude_unset=True))
chunk.usage = UsageInfo(prompt_tokens=3, completion_tokens=1, total_tokens=4)
out["completion_chunk_continuous_usage"] = json.loads(chunk.model_dump_json(exclude_unset=True))
last = CompletionStreamResponse(id=ID, object="text_completion", created=CREATED, model=MODEL,
    choices=[CompletionResponseStreamChoice(index=0, text=" w2", logprobs=None, finish_reason="length",
                                            stop_reason=None, prompt_token_ids=None, token_ids=None)])
out["completion_chunk_last"] = json.loads(last.model_dump_json(exclude_unset=True))
final = CompletionStreamResponse(id=ID, created=CREATED, model=MODEL, choices=[], usage=usage(3, 2, 0),
                                 system_fingerprint=None, metrics=None)
out["completion_usage_chunk"] = json.loads(final.model_dump_json(exclude_unset=False, exclude_none=True))
full = CompletionResponse(id=ID, created=CREATED, model=MODEL, choices=[CompletionResponseChoice(
    index=0, text="w1 w2", logprobs=None, finish_reason="length", stop_reason=None, prompt_logprobs=None,
    token_ids=None, routed_experts=None)], usage=usage(3, 2, 0), system_fingerprint=None,
    kv_transfer_params=None, ec_transfer_params=None, metrics=None)
out["completion_response"] = json.loads(full.model_dump_json())

first = ChatCompletionStreamResponse(id=ID, object="chat.completion.chunk", created=CREATED, model=MODEL,
    choices=[ChatCompletionResponseStreamChoice(index=0, delta=DeltaMessage(role="assistant", content=""),
                                                logprobs=None, finish_reason=None)],
    prompt_token_ids=None, prompt_text=None)
out["chat_chunk_role"] = json.loads(first.model_dump_json(exclude_unset=True))
first.usage = UsageInfo(prompt_tokens=3, completion_tokens=0, total_tokens=3, completion_tokens_details=None)
out["chat_chunk_role_continuous_usage"] = json.loads(first.model_dump_json(exclude_unset=True))


def chat_chunk(delta, **choice):
    """A token chunk as the chat serving code builds it (token_ids always passed)."""
    return ChatCompletionStreamResponse(id=ID, object="chat.completion.chunk", created=CREATED, model=MODEL,
        choices=[ChatCompletionResponseStreamChoice(index=0, delta=delta, logprobs=None, token_ids=None,
                                                    **choice)])


mid = chat_chunk(DeltaMessage(content=" w1"), finish_reason=None)
out["chat_chunk"] = json.loads(mid.model_dump_json(exclude_unset=True))
mid.usage = UsageInfo(prompt_tokens=3, completion_tokens=1, total_tokens=4, completion_tokens_details=None)
out["chat_chunk_continuous_usage"] = json.loads(mid.model_dump_json(exclude_unset=True))
think = chat_chunk(DeltaMessage(reasoning=" w1"), finish_reason=None)
out["chat_chunk_reasoning"] = json.loads(think.model_dump_json(exclude_unset=True))
end = chat_chunk(DeltaMessage(content=" w2"), finish_reason="length", stop_reason=None)
out["chat_chunk_last"] = json.loads(end.model_dump_json(exclude_unset=True))
final = ChatCompletionStreamResponse(id=ID, object="chat.completion.chunk", created=CREATED, choices=[],
    model=MODEL, usage=usage(3, 2, 0), system_fingerprint=None, metrics=None)
out["chat_usage_chunk"] = json.loads(final.model_dump_json(exclude_unset=True, exclude_none=True))
full = ChatCompletionResponse(id=ID, created=CREATED, model=MODEL, choices=[ChatCompletionResponseChoice(
    index=0, message=ChatMessage(role="assistant", content="w1 w2", reasoning=None), logprobs=None,
    finish_reason="length", stop_reason=None, token_ids=None)], usage=usage(3, 2, 0),
    prompt_logprobs=None, prompt_token_ids=None, kv_transfer_params=None)
out["chat_response"] = json.loads(full.model_dump_json())
full_r = ChatCompletionResponse(id=ID, created=CREATED, model=MODEL, choices=[ChatCompletionResponseChoice(
    index=0, message=ChatMessage(role="assistant", content="w2", reasoning="w1"), logprobs=None,
    finish_reason="length", stop_reason=None, token_ids=None)], usage=usage(3, 2, 0),
    prompt_logprobs=None, prompt_token_ids=None, kv_transfer_params=None)
out["chat_response_reasoning"] = json.loads(full_r.model_dump_json())
err = ErrorResponse(error=ErrorInfo(message="MSG", type="BadRequestError", param=None, code=400))
out["error"] = json.loads(err.model_dump_json())
card = ModelCard(id=MODEL, created=CREATED, root=MODEL, max_model_len=4096,
                 permission=[ModelPermission(id="PERM", created=CREATED)])
out["models"] = json.loads(ModelList(data=[card]).model_dump_json())
print(json.dumps(out, indent=1))
