"""hangar.kinds"""
