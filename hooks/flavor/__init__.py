"""hooks/flavor: node discovery into flavors, and flavors into pools.

Two DecoratorControllers share this app:

- `node`: decorates every Node with its chain labels and attaches one NodeFlavors summary
  (`summary`) per managed node;
- `pools`: decorates the Settings singleton with the ResourceFlavors, the Topology and the
  derived InstanceTypes computed from all summaries (`objects` builds them).

`request` holds what both read: the settings object and a lean request parse for large requests.
"""
