"""Read-only views of the fleet: the `fleet` tables and the `dashboard` page.

Imports only the contract and kube layers (never agent, controller or sim): everything shown is read from
the objects the agents and the controller already publish.
"""
