"""hangar.kinds.execution"""
