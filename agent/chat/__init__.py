"""The parts of the OpenAI-compatible policy (agent.openai_policy.OpenAIPolicy composes them):

catalog   prices and context windows by model name
history   the conversation in a neutral form: turns of text, tool calls and their results
prompts   the system prompt, the text protocol, the task message
render    a turn as chat messages (native tool calls or ```tool blocks), shortened by level
context   how much of the conversation is sent: shorten older turns, then drop the oldest
client    one chat-completions request: retries, backoff and the endpoint's errors in words
parse     a reply as a turn: tool calls native or in text blocks, reasoning, usage
"""
