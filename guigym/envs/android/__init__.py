"""Android environments: device layer, observations, AndroidLab / AndroidWorld tasks."""
