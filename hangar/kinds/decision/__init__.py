"""hangar.kinds.decision"""
