"""This project's overrides of specfleet's packaged defaults, for every host of every fleet file.

`specfleet vars` lists every variable with its default and what it does. Assign only what you change,
one `name = value` per line, e.g.

    operator_users = ["alice"]
    hub_endpoint = "https://hf-mirror.lab.example"

Precedence, lowest first: packaged defaults < this file < the deploy's profile < the fleet file's vars
(all < parent group < child group < host). An `extra_llm_api_options` set here is merged UNDER the
profile's TRT-LLM options (it adds options the profile does not set); change a profile's option in the
fleet file's vars. Unknown names are refused; connection vars (ssh_*, _sudo) belong in the fleet file.
pyinfra also reads this file as group data for the group `all`.
"""
