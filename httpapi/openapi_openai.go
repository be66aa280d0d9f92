package httpapi

// openaiOperations are the OpenAI-compatible routes of a queue endpoint
// (openai.go): the common OpenAI routes by name, and any other route under
// /openai/v1/ through the prefix route.
func openaiOperations() []op {
	eid := pathP("endpointId", "")
	// Errors are OpenAI's shape; those Berth answers before the route
	// (unknown endpoint, rate limit) are the job API's {"error": "…"}.
	oErr := func(desc string) obj {
		return resp(desc, obj{"anyOf": []obj{ref("JobError"), object(obj{"error": object(obj{
			"message": strS(""), "type": strS(""), "param": anyS(""), "code": anyS("")}, "message")}, "error")}})
	}
	reply := obj{
		"200": obj{"description": "The worker's output as the body (the OpenAI JSON); with \"stream\": true, the worker's stream chunks as server-sent events ending with data: [DONE].",
			"content": obj{"application/json": obj{"schema": anyS("")}, "text/event-stream": obj{"schema": strS("")}}},
		"400": oErr("The body is not a JSON object, the endpoint is a LOAD_BALANCER endpoint, or the worker answered 400."),
		"404": oErr("Endpoint not found, or the worker answered 404 (an unknown model or route)."),
		"413": oErr("Body over 20 MB."),
		"429": oErr("Rate limit of the endpoint's /openai/* requests exceeded (Retry-After says when to retry), or the worker answered 429."),
		"500": oErr("The job failed (the worker raised), or the worker answered another error status, kept as is."),
		"503": oErr("The job was cancelled (for example its endpoint was deleted)."),
		"504": oErr("The job exceeded its execution timeout."),
	}
	in := obj{"required": true, "content": jsonContent(obj{"type": "object", "description": "The OpenAI request, handed to the worker as openai_input."})}
	desc := "Becomes a job with input {\"openai_route\": \"/v1/<route>\", \"openai_input\": <body>} (RunPod's shape, read by worker-vllm). " +
		"A client that disconnects cancels the job. The X-Berth-Job-Id header names the job."
	named := func(method, route, id, summary string) op {
		o := op{method: method, path: "/v2/{endpointId}/openai/v1/" + route, id: id, tag: "OpenAI route", summary: summary,
			desc: desc, params: []obj{eid}, responses: reply}
		if method == "POST" {
			o.body = in
		}
		return o
	}
	return []op{
		named("POST", "chat/completions", "OpenAIChatCompletions", "OpenAI chat completions through a job"),
		named("POST", "completions", "OpenAICompletions", "OpenAI completions through a job"),
		named("POST", "embeddings", "OpenAIEmbeddings", "OpenAI embeddings through a job"),
		named("POST", "responses", "OpenAIResponses", "OpenAI responses through a job"),
		named("GET", "models", "OpenAIModels", "OpenAI model list through a job"),
		{method: "POST", path: "/v2/{endpointId}/openai/v1/", id: "OpenAIAny", tag: "OpenAI route", summary: "Any other route under /openai/v1/ (POST)",
			desc: desc + " This operation stands for every path under /openai/v1/.", params: []obj{eid}, body: in, responses: reply},
		{method: "GET", path: "/v2/{endpointId}/openai/v1/", id: "OpenAIAnyGet", tag: "OpenAI route", summary: "Any other route under /openai/v1/ (GET)",
			desc: desc + " This operation stands for every path under /openai/v1/; openai_input is {}.", params: []obj{eid}, responses: reply},
	}
}
